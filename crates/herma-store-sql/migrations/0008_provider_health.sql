-- Shared provider health for typed conversations: one row per limited resource (a provider
-- route, a provider account, or an upstream model identity held against other routes), its
-- condition, when it is eligible again, where the delay came from, how many recoveries failed,
-- when it was observed (a success observed earlier never clears it), and the one recovery
-- probe's lease. Only normalized seconds and fixed labels: no header text, no caller. Times are
-- Unix ms.

CREATE TABLE conversation_health (
    resource    {key_text} NOT NULL PRIMARY KEY,
    scope       TEXT NOT NULL,
    condition   TEXT NOT NULL,
    until_at    {integer} NOT NULL,
    source      TEXT NOT NULL,
    failures    {integer} NOT NULL CHECK (failures >= 0),
    limited_at  {integer} NOT NULL,
    origin      TEXT NOT NULL,
    probe_until {integer},
    probe_id    TEXT
);
