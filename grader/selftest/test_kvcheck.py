"""grader/evidence/trusted/kvcheck.py's reply_mixup(): a client that took
a stale reply is named for it, whether the stale reply was the duplicate
sent just before this request's reply or the previous request's real
reply, left over since an earlier request took a duplicate that looked
the same (fresh-clone make test: mutant 15/no-seq-match showed only
"printed 'rget k: absent', but the ... reply to that request said ok")."""

from grader.evidence.trusted.kvcheck import reply_mixup

OP = {"op": "rget", "key": "k"}


def _req(seq, status, slot=None, version=None, **kw):
    return {"seq": seq, "status": status, "slot": slot, "version": version,
            **kw}


def test_the_duplicate_just_before_is_a_stale_reply():
    earlier = [_req(4, "absent", 3, 0)]
    r = _req(5, "ok", 3, 2, dup_before=True)
    res = {"line": "rget k: absent", "status": "absent"}
    why = reply_mixup("client", 6, OP, res, r, earlier)
    assert "duplicate of the previous request's reply" in why
    assert "a stale reply" in why and "seq 4, not 5" in why


def test_a_reply_left_over_after_an_earlier_duplicate_is_a_stale_reply():
    earlier = [_req(3, "absent", 3, 0, dup_before=True),
               _req(4, "absent", 3, 0)]
    r = _req(5, "ok", 3, 2)
    res = {"line": "rget k: absent", "status": "absent"}
    why = reply_mixup("client", 6, OP, res, r, earlier)
    assert "left over" in why and "a stale reply" in why


def test_an_unrelated_wrong_answer_is_not_called_stale():
    earlier = [_req(4, "ok", 1, 2, dup_before=True)]
    r = _req(5, "ok", 3, 2)
    res = {"line": "rget k: absent", "status": "absent"}
    why = reply_mixup("client", 6, OP, res, r, earlier)
    assert "stale" not in why and "said ok (slot 3, version 2)" in why
