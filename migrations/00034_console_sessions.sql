-- +goose Up
-- The operator console's sessions (internal/console, auth.go), so that a
-- logout ends a session on the server: its cookie opens no page after
-- POST /logout, at any console that shares this database. Several consoles
-- may share one operator token (one per operator, or one beside the
-- reapers), and a browser sends a cookie to every port of a host; a
-- session held in one console's memory could not be ended at another, and
-- would end with every restart.
--
-- id_hash is the SHA-256 of the cookie's random part: the table never holds
-- what opens a page, so a read of it (a backup, a replica) lets no one in.
-- A logout deletes the row; expired rows are deleted at the next login.
-- It is a reference table (docs/scaling.md): no tenant's, looked up by
-- id_hash alone.
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
