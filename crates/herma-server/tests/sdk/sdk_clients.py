"""The official OpenAI and Anthropic Python SDKs against a running Herma.

Run by the Rust test `sdk::official_sdks_talk_to_herma` with HERMA_BASE, HERMA_KEY and
MOCK_BASE set. Each check asserts; the script prints {"checks": N} and exits 0 when all hold.
"""

import json
import os
import sys

import anthropic
import openai

BASE = os.environ["HERMA_BASE"]
KEY = os.environ["HERMA_KEY"]
MOCK = os.environ["MOCK_BASE"]
DIRECT = "Deploys are frozen until Monday."
TEXT = "Hello from the mock upstream."
UP = {"X-Upstream-Base-Url": MOCK}

checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


oa = openai.OpenAI(api_key=KEY, base_url=BASE + "/v1", default_headers=UP, max_retries=0)
an = anthropic.Anthropic(api_key=KEY, base_url=BASE, default_headers=UP, max_retries=0)
user = lambda text: [{"role": "user", "content": text}]

# --- Chat Completions -------------------------------------------------------------------
r = oa.chat.completions.create(model="gpt-test", messages=user("freeze-check please"))
check(r.choices[0].message.content == DIRECT, "chat direct answer")
check(r.object == "chat.completion" and r.usage.total_tokens == 0, "chat direct zero usage")

chunks = list(oa.chat.completions.create(model="gpt-test", messages=user("freeze-check"), stream=True, stream_options={"include_usage": True}))
check("".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == DIRECT, "chat direct stream text")
check(chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 0, "chat direct stream usage chunk")

raw = oa.chat.completions.with_raw_response.create(model="gpt-test", messages=user("hello there"))
check(raw.headers.get("x-herma-receipt", "").startswith("rcpt_"), "chat forwarded receipt header")
check(raw.parse().choices[0].message.content == TEXT, "chat forwarded text")

chunks = list(oa.chat.completions.create(model="gpt-test", messages=user("please deploy"), stream=True))
check("".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT, "chat forwarded stream")

r = oa.chat.completions.create(model="gpt-test", messages=user("weather?"), extra_headers={"x-mock-scenario": "tools"})
call = r.choices[0].message.tool_calls[0]
check(call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}, "chat tool call")
args = ""
for c in oa.chat.completions.create(model="gpt-test", messages=user("weather?"), stream=True, extra_headers={"x-mock-scenario": "tools"}):
    for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
        args += tc.function.arguments or ""
check(json.loads(args) == {"city": "Paris"}, "chat streamed tool call arguments")

with oa.chat.completions.stream(model="gpt-test", messages=user("freeze-check")) as s:
    final = s.get_final_completion()
check(final.choices[0].message.content == DIRECT, "chat stream helper on a direct answer")

# --- Responses ---------------------------------------------------------------------------
r = oa.responses.create(model="gpt-test", input="freeze-check now")
check(r.output_text == DIRECT and r.status == "completed", "responses direct answer")
events = list(oa.responses.create(model="gpt-test", input="freeze-check", stream=True))
check(events[0].type == "response.created" and events[-1].type == "response.completed", "responses direct stream frame")
check([e.sequence_number for e in events] == list(range(len(events))), "responses sequence numbers")
check("".join(e.delta for e in events if e.type == "response.output_text.delta") == DIRECT, "responses direct deltas")
with oa.responses.stream(model="gpt-test", input="freeze-check") as s:
    final = s.get_final_response()
check(final.output_text == DIRECT, "responses stream helper on a direct answer")

r = oa.responses.create(model="gpt-test", input=[{"role": "user", "content": "deploy it"}])
check(r.output_text == TEXT, "responses forwarded")
with oa.responses.stream(model="gpt-test", input="weather?", extra_headers={"x-mock-scenario": "tools"}) as s:
    final = s.get_final_response()
calls = [o for o in final.output if o.type == "function_call"]
check(final.output_text == TEXT and calls and calls[0].name == "get_weather", "responses forwarded stream with reasoning and a function call")

# --- Messages ----------------------------------------------------------------------------
m = an.messages.create(model="claude-test", max_tokens=64, messages=user("freeze-check"))
check(m.content[0].text == DIRECT and m.stop_reason == "end_turn" and m.usage.output_tokens == 0, "messages direct answer")
with an.messages.stream(model="claude-test", max_tokens=64, messages=user("freeze-check")) as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
check(streamed == DIRECT and final.content[0].text == DIRECT, "messages stream helper on a direct answer")

raw = an.messages.with_raw_response.create(model="claude-test", max_tokens=64, messages=user("please deploy"))
check(raw.headers.get("x-herma-receipt", "").startswith("rcpt_"), "messages forwarded receipt header")
check(raw.parse().content[0].text == TEXT, "messages forwarded text")

m = an.messages.create(model="claude-test", max_tokens=64, messages=user("weather?"), extra_headers={"x-mock-scenario": "tools"})
kinds = [b.type for b in m.content]
check(kinds == ["thinking", "text", "tool_use"] and m.content[2].input == {"city": "Paris"}, "messages thinking and tool use")
with an.messages.stream(model="claude-test", max_tokens=64, messages=user("weather?"), extra_headers={"x-mock-scenario": "tools"}) as s:
    final = s.get_final_message()
check([b.type for b in final.content] == ["thinking", "text", "tool_use"] and final.content[2].input == {"city": "Paris"}, "messages streamed thinking and tool use")
check(final.usage.output_tokens == 7, "messages streamed usage")

check(an.messages.count_tokens(model="claude-test", messages=user("hi")).input_tokens == 42, "count_tokens forwarded")
check(oa.models.list().data[0].id == "mock-model", "models forwarded")

# --- Errors in each SDK's own terms -------------------------------------------------------
bad_oa = openai.OpenAI(api_key="hmk_0000000000000000_" + "0" * 64, base_url=BASE + "/v1", default_headers=UP, max_retries=0)
try:
    bad_oa.chat.completions.create(model="gpt-test", messages=user("hi"))
    check(False, "openai bad key")
except openai.AuthenticationError as e:
    check(e.status_code == 401 and e.code == "unauthorized", "openai AuthenticationError")
bad_an = anthropic.Anthropic(api_key="not-a-key", base_url=BASE, default_headers=UP, max_retries=0)
try:
    bad_an.messages.create(model="claude-test", max_tokens=8, messages=user("hi"))
    check(False, "anthropic bad key")
except anthropic.AuthenticationError as e:
    check(e.status_code == 401, "anthropic AuthenticationError")
try:
    oa.responses.create(model="vendor/model:contributor", input="hi")
    check(False, "contributor model")
except openai.PermissionDeniedError as e:
    check(e.code == "contributor_tier_refused", "openai PermissionDeniedError for a contributor model")
try:
    an.messages.create(model="Model-CONTRIBUTOR", max_tokens=8, messages=user("hi"))
    check(False, "contributor model")
except anthropic.PermissionDeniedError as e:
    check(e.body["error"]["code"] == "contributor_tier_refused", "anthropic PermissionDeniedError for a contributor model")
try:
    oa.chat.completions.create(model="gpt-test", messages=user("hi"), extra_headers={"x-mock-scenario": "rate_limit"})
    check(False, "rate limit")
except openai.RateLimitError as e:
    check(e.code == "rate_limit_exceeded", "openai RateLimitError relayed")
try:
    an.messages.create(model="claude-test", max_tokens=8, messages=user("hi"), extra_headers={"x-mock-scenario": "rate_limit"})
    check(False, "rate limit")
except anthropic.RateLimitError as e:
    check(e.response.headers.get("retry-after") == "7", "anthropic RateLimitError relayed with retry-after")
try:
    with an.messages.stream(model="claude-test", max_tokens=8, messages=user("hi"), extra_headers={"x-mock-scenario": "error_event"}) as s:
        s.get_final_message()
    check(False, "error event")
except anthropic.APIError as e:
    check("Overloaded" in str(e) or "overloaded" in str(e), "anthropic error event mid-stream")

print(json.dumps({"checks": checks}))
