"""The official MCP Python SDK (`mcp`) as a client of Herma's `POST /mcp`.

Run by the Rust test `public::mcp_sdk_client_lists_and_calls_tools` with HERMA_BASE and
HERMA_KEY set. It connects three ways: the default (`server/discover`, the stateless 2026
revision), the legacy initialize handshake, and with a Herma key. Each check asserts; the script
prints {"checks": N} and exits 0 when all hold.
"""

import asyncio
import json
import os
import sys
import warnings


import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

BASE = os.environ["HERMA_BASE"]
KEY = os.environ["HERMA_KEY"]
URL = BASE + "/mcp"
PUBLIC_TOOLS = {"herma_preview", "herma_discovery"}
KEY_TOOLS = PUBLIC_TOOLS | {"herma_dry_run", "herma_list_provisions", "herma_list_context", "herma_insights"}

checks = 0


def check(condition, what):
    global checks
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


CHAT = {"protocol": "chat_completions", "body": {"model": "gpt-test", "messages": [{"role": "user", "content": "my build failed with error TS2345"}]}}


async def public_session(client, label):
    tools = (await client.list_tools()).tools
    check({t.name for t in tools} == PUBLIC_TOOLS, f"{label}: public tools listed ({[t.name for t in tools]})")
    for tool in tools:
        check(tool.input_schema.get("type") == "object", f"{label}: {tool.name} has an input schema")
        check((tool.output_schema or {}).get("type") == "object", f"{label}: {tool.name} has an output schema")

    found = await client.call_tool("herma_discovery", {})
    check(not found.is_error, f"{label}: discovery is not an error")
    check(found.structured_content["name"] == "Herma", f"{label}: discovery names Herma")
    check(found.structured_content["public"]["mcp"] == "/mcp", f"{label}: discovery lists the MCP route")
    check("2026-07-28" in found.structured_content["protocol_versions"]["mcp"], f"{label}: discovery lists MCP versions")

    preview = await client.call_tool("herma_preview", CHAT)
    check(not preview.is_error, f"{label}: preview is not an error")
    report = preview.structured_content
    check(report["persisted"] is False and report["upstream_contacted"] is False, f"{label}: preview persists nothing")
    check(report["decision"] in ("forward", "shim_context", "respond_directly"), f"{label}: preview decision")
    check(json.loads(preview.content[0].text) == report, f"{label}: text content mirrors structured content")

    bad = await client.call_tool("herma_preview", {"protocol": "smtp", "body": {}}
)
    check(bad.is_error, f"{label}: an invalid body is a tool error (isError), not a JSON-RPC error")

    resources = (await client.list_resources()).resources
    uris = {str(r.uri) for r in resources}
    check(uris == {"herma://docs/llms.txt", "herma://connect.json"}, f"{label}: public resources ({uris})")
    llms = await client.read_resource("herma://docs/llms.txt")
    check(llms.contents[0].text.startswith("# Herma"), f"{label}: llms.txt resource")
    connect = await client.read_resource("herma://connect.json")
    check(json.loads(connect.contents[0].text)["name"] == "Herma", f"{label}: connect.json resource")


async def main():
    async with Client(URL) as client:
        check(client.protocol_version == "2026-07-28", f"auto mode negotiates the stateless revision ({client.protocol_version})")
        await public_session(client, "stateless")

    async with Client(URL, mode="legacy") as client:
        check(client.protocol_version == "2025-11-25", f"legacy mode negotiates 2025-11-25 ({client.protocol_version})")
        check(client.server_info.name == "herma", "legacy: server info")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ping is handshake-era only; this is the handshake
            await client.send_ping()
        await public_session(client, "legacy")

    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            tools = (await client.list_tools()).tools
            check({t.name for t in tools} == KEY_TOOLS, f"keyed: all tools listed ({[t.name for t in tools]})")
            provisions = await client.call_tool("herma_list_provisions", {})
            check(not provisions.is_error, "keyed: list provisions")
            check([p["id"] for p in provisions.structured_content["items"]] == ["deploy"], "keyed: own provisions only")
            dry = await client.call_tool("herma_dry_run", {"protocol": "messages", "body": {"model": "claude-test", "max_tokens": 16, "messages": [{"role": "user", "content": "please deploy"}]}})
            check(not dry.is_error and dry.structured_content["decision"] == "shim_context", "keyed: dry run uses the caller's rules")
            check(dry.structured_content["persisted"] is False, "keyed: dry run persists nothing")
            insights = await client.call_tool("herma_insights", {})
            check(not insights.is_error and "candidate_provisions" in insights.structured_content, "keyed: insights")
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            check("herma://provisions" in uris and "herma://insights" in uris, "keyed: own resources listed")
            listed = await client.read_resource("herma://provisions")
            check(json.loads(listed.contents[0].text)["items"][0]["id"] == "deploy", "keyed: provisions resource")

    print(json.dumps({"checks": checks}))


asyncio.run(main())
