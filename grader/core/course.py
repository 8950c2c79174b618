"""The course tree and its lessons: where they are, which a command names,
which need an RDMA device."""

import tomllib
from pathlib import Path

COURSE = Path(__file__).resolve().parent.parent.parent


def lesson_names(course, src, wanted=()):
    """The lessons to build: `wanted` (NN-topic names), or every lesson."""
    names = wanted or sorted(p.name for p in (course / "lessons").glob(
        "[0-9][0-9]-*") if p.is_dir())
    return [n for n in names if (course / "lessons" / n).is_dir()]


def needs_device(name):
    """Does lesson `name` need an RDMA device? (lesson.toml: device)"""
    meta = COURSE / "lessons" / name / "lesson.toml"
    try:
        return tomllib.loads(meta.read_text()).get("device", True)
    except (OSError, tomllib.TOMLDecodeError):
        return True


def parse_lessons(arg):
    """'5', '05', '05-send-recv', '05,06' -> lesson directory names."""
    lessons = {p.name[:2]: p.name for p in (COURSE / "lessons").glob(
        "[0-9][0-9]-*") if p.is_dir()}
    names = []
    for tok in arg.replace(",", " ").split():
        num = tok.split("-")[0].zfill(2)
        if not num.isdigit() or num not in lessons:
            raise SystemExit(f"no lesson '{tok}'; the lessons are: "
                             + " ".join(sorted(lessons.values())))
        names.append(lessons[num])
    return names
