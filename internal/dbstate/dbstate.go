// Package dbstate tells a database that is away from a request that went
// wrong. The contract answers the first with 503 database_unavailable and a
// Retry-After, since the same request will work once PostgreSQL is back;
// only the second is a 500. It owns that one decision, so the api's
// problem table, the state machine's lease release and the reaper agree on
// it.
package dbstate

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable marks an error as the database being unreachable, down,
// restarting or too slow to answer. Wrap wraps errors with it; Unavailable
// also recognises the driver's errors unwrapped.
var ErrUnavailable = errors.New("database unavailable")

// Unavailable reports whether err means that the database could not be
// reached or did not answer in time, rather than that it refused the
// request:
//
//   - no connection could be made (refused, unreachable, connect_timeout);
//   - the connection broke mid-statement (reset, EOF: a server that was
//     stopped or crashed), or was already closed;
//   - the server said it is shutting down, starting up or in recovery
//     (SQLSTATE 57P01..57P03), that the connection failed (class 08), or
//     that it has no connection slot left (53300);
//   - a statement hit statement_timeout or lock_timeout (57014, 55P03):
//     the database is up but too busy or blocked, and the same request
//     later will do;
//   - a write was refused as read-only (25006): the node is a standby now,
//     after a failover;
//   - a database call's own deadline passed;
//   - a statement met a schema change or a prepared statement the server
//     no longer has (StaleStatement), or a function's result type changed
//     under a call in flight (an online ALTER TABLE … ADD COLUMN on the
//     table whose row type the function returns: 42804 from
//     build_attrmap_by_position): the same request again will do.
//
// A constraint violation, a syntax error, a serialisation failure and every
// other answer of a working server are not "unavailable".
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	// An HTTP client's error (the PSP's) carries network errors too; they
	// say nothing about the database.
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08", // connection_exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now
			pgErr.Code == "53300", // too_many_connections
			pgErr.Code == "57014", // query_canceled: statement_timeout
			pgErr.Code == "55P03", // lock_not_available: lock_timeout
			// read_only_sql_transaction: phasepay opens no read-only
			// transaction, so a write refused as read-only went to a node
			// that is no longer the primary (a failover); dbpool closes
			// the connection, and the retry finds the new primary.
			pgErr.Code == "25006",
			pgErr.Code == "42804" && pgErr.Routine == "build_attrmap_by_position", // datatype_mismatch of a RETURN QUERY
			StaleStatement(err):
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connectErr),
		errors.As(err, &netErr),
		errors.Is(err, pgconn.ErrConnClosed),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded) && pgconn.Timeout(err):
		return true
	}
	return false
}

// StaleStatement reports whether err says that a prepared statement of the
// connection is no longer what the client believes it is:
//
//   - gone (26000 invalid_sql_statement_name): a DEALLOCATE or DISCARD
//     ALL (a pooler's reset query, an operator) dropped it, or a pooler
//     sent it to a server connection that never had it;
//   - changed (0A000 from RevalidateCachedQuery, "cached plan must not
//     change result type"): a column type change altered its result.
//
// Either way the client must forget the statement and prepare it again;
// the request that met it may be retried. The routine, not the message,
// decides the second case: messages are translated under lc_messages.
func StaleStatement(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "26000" || pgErr.Code == "0A000" && pgErr.Routine == "RevalidateCachedQuery"
}

// Wrap returns err marked with ErrUnavailable if Unavailable(err), else
// err unchanged.
func Wrap(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !Unavailable(err) {
		return err
	}
	return errors.Join(ErrUnavailable, err)
}
