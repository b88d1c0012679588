"""A2/B2 over HTTP: a post of an input is answered alike however the request is written --
the usual JSON post with a bearer token, and the same post with a content type carrying a
charset, a scheme in lower case, an extra query parameter or a ``wait`` written otherwise --
and a post that is not a valid input is refused alike, nothing written."""

from __future__ import annotations

from tests.service.conftest import ALICE, OPERATOR, Live, assert_problem, open_conversation


def inputs(conv: str) -> str:
    return f"/v1/conversations/{conv}/inputs"


async def test_b2_http_a_post_is_answered_alike_however_it_is_written(live: Live) -> None:
    async with live.client(None) as anyone:
        async with live.client(ALICE) as alice:
            conv = await open_conversation(alice)
        plain = {"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"}
        ways = [
            ("?wait=30", plain),
            ("?wait=30", plain | {"Content-Type": "application/json; charset=utf-8"}),
            ("?wait=30", plain | {"Authorization": f"bearer {ALICE}"}),
            ("?wait=30&other=1", plain),
            ("?wait=3e1", plain),
            ("?wait=30.000", plain),
        ]
        for n, (query, headers) in enumerate(ways):
            words = f"way {n} é"
            response = await anyone.post(inputs(conv) + query, headers=headers,
                                         content=f'{{"content": "{words}"}}'.encode())
            assert response.status_code == 200, (query, headers, response.text)
            assert response.headers["content-type"] == "application/json"
            answer = response.json()
            assert (answer["status"], answer["reply"], answer["timed_out"]) == (
                "completed", words, False), (query, headers)
            assert answer["input"]["authored_by"]["handle"] == "alice"
        accepted = await anyone.post(inputs(conv), headers=plain, json={"content": "no wait"})
        assert accepted.status_code == 202
        assert accepted.json()["content"] == "no wait"

        for body, status, code in (
            (b'{"content": 5}', 422, "invalid_input"),
            (b'{"content": "hi", "origin": "kernel"}', 422, "origin_not_allowed"),
            (b"[]", 422, "invalid_input"),
            (b'{"content": "hi"', 400, "malformed_body"),
            (b'{"content": "\xff"}', 400, "malformed_body"),
            (b"", 422, "invalid_input"),
        ):
            refused = await anyone.post(inputs(conv) + "?wait=30", headers=plain, content=body)
            assert_problem(refused, status, code)
        missing = await anyone.post(inputs(conv) + "?wait=30", json={"content": "hi"})
        assert_problem(missing, 401, "unauthorized")
        assert missing.headers["www-authenticate"] == 'Bearer realm="tidings"'
        unknown = await anyone.post(inputs("conv_nobody") + "?wait=30", headers=plain,
                                    json={"content": "hi"})
        assert_problem(unknown, 404, "unknown_conversation")

        by_operator = await anyone.post(
            inputs(conv) + "?wait=30", json={"content": "from the desk"},
            headers=plain | {"Authorization": f"Bearer {OPERATOR}"})
        assert by_operator.status_code == 200
        assert by_operator.json()["reply"] == "from the desk"
        assert by_operator.json()["input"]["authored_by"]["handle"] == "operator"

        async with live.client(ALICE) as alice:
            listed = (await alice.get(inputs(conv))).json()["items"]
        assert len(listed) == len(ways) + 2  # the refused posts wrote nothing
