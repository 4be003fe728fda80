package dbpool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/envconfig"
)

// Pooler says what DATABASE_URL connects through (DATABASE_POOLER).
type Pooler string

const (
	// PoolerNone: DATABASE_URL is the server itself, or a pooler in
	// session mode (one server connection per client connection), which
	// keeps everything a session has.
	PoolerNone Pooler = ""
	// PoolerTransaction: DATABASE_URL goes through a transaction-mode
	// pooler (PgBouncer's pool_mode = transaction), which hands each
	// transaction, or each statement outside one, whichever server
	// connection is free. Nothing of a session survives from one
	// transaction to the next: no named prepared statement, no session
	// setting, no session advisory lock, no LISTEN; and the pooler refuses
	// startup parameters it does not know (statement_timeout, …).
	PoolerTransaction Pooler = "transaction"
)

// Config is how a process connects to PostgreSQL, from the contract's
// DATABASE_URL, DATABASE_POOLER and DATABASE_DIRECT_URL.
type Config struct {
	// URL (DATABASE_URL) is where every transaction goes.
	URL string
	// Pooler (DATABASE_POOLER) declares a transaction pooler on URL.
	Pooler Pooler
	// DirectURL (DATABASE_DIRECT_URL), with a pooler, is the server
	// itself, for what a transaction pooler cannot carry: LISTEN, and
	// `api migrate` (DDL under a session advisory lock). Empty: only the
	// pooler is reachable, and notifications are polled (Notifications).
	DirectURL string
}

// ConfigFromEnv reads Config from the environment and validates it.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		URL:       envconfig.String(getenv, "DATABASE_URL", DatabaseURLDefault),
		Pooler:    Pooler(getenv("DATABASE_POOLER")),
		DirectURL: getenv("DATABASE_DIRECT_URL"),
	}
	return c, c.Validate()
}

// Validate checks the combination, in one line.
func (c Config) Validate() error {
	switch c.Pooler {
	case PoolerNone, PoolerTransaction:
	default:
		return fmt.Errorf("DATABASE_POOLER: %q is not a pooling mode phasepay knows (transaction, or unset)", string(c.Pooler))
	}
	if c.DirectURL != "" && c.Pooler == PoolerNone {
		return errors.New("DATABASE_DIRECT_URL is set but DATABASE_POOLER is not: without a pooler DATABASE_URL is the direct connection")
	}
	for name, u := range map[string]string{"DATABASE_URL": c.URL, "DATABASE_DIRECT_URL": c.DirectURL} {
		if u == "" {
			continue
		}
		if _, err := pgx.ParseConfig(u); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if c.Pooler == PoolerTransaction {
		if mode := urlParam(c.URL, "default_query_exec_mode"); mode == "cache_statement" {
			return errors.New("DATABASE_URL: default_query_exec_mode=cache_statement prepares named statements, which a transaction pooler loses; leave it unset with DATABASE_POOLER=transaction")
		}
	}
	return nil
}

// Direct returns the connection string of the server itself: DirectURL
// behind a pooler, URL without one; "" behind a pooler with no DirectURL.
func (c Config) Direct() string {
	if c.Pooler == PoolerNone {
		return c.URL
	}
	return c.DirectURL
}

// PoolConfig parses URL into a pool configuration fit for its pooler
// (Configure), with PoolMaxConnsDefault unless URL sets pool_max_conns.
func (c Config) PoolConfig() (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	Configure(cfg.ConnConfig, c.URL, c.Pooler)
	cfg.AfterConnect = registerExecTypes
	// pgxpool's default (4 connections on 2 cores) caps the transactions in
	// flight, and with them group commit; unless DATABASE_URL says
	// otherwise (pool_max_conns), allow as many as a busy API has requests.
	if !strings.Contains(c.URL, "pool_max_conns") {
		cfg.MaxConns = PoolMaxConnsDefault
	}
	return cfg, nil
}

// ConnConfig parses URL into the configuration of one connection (the
// operator commands'), fit for its pooler.
func (c Config) ConnConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	Configure(cfg, c.URL, c.Pooler)
	return cfg, nil
}

// Configure applies phasepay's connection settings to cfg, keeping
// whatever connString set explicitly:
//
//   - without a pooler, the server-side limits and plan cache mode (the
//     constants of dbpool.go) go as startup parameters of every
//     connection;
//   - behind a transaction pooler, none does (the pooler refuses startup
//     parameters it does not know, or, told to ignore them, drops them):
//     the limits are the database's own defaults (ApplySettings, run by
//     `api migrate`; CheckSettings at start), and statements go in pgx's
//     exec mode, which prepares no named statement (the phase engine's
//     pipeline follows the connection's mode).
//
// Either way, a connection that cannot be opened within
// ConnectTimeoutDefault fails.
func Configure(cfg *pgx.ConnConfig, connString string, pooler Pooler) {
	if pooler == PoolerTransaction {
		if urlParam(connString, "default_query_exec_mode") == "" {
			cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
	} else {
		params := cfg.RuntimeParams
		for _, s := range Settings {
			if _, set := params[s.Name]; !set {
				params[s.Name] = s.Value
			}
		}
	}
	if !strings.Contains(connString, "connect_timeout") {
		cfg.ConnectTimeout = ConnectTimeoutDefault
	}
	leaveReadOnlyNodes(cfg)
}

// RegisterExecTypes tells conn the PostgreSQL type of the Go types
// phasepay passes whose type pgx's exec and simple_protocol modes cannot
// infer: they send parameters as text, typed by their Go type alone, and a
// map[string]string could be json or hstore. (The other modes describe a
// statement first and learn it from the server; there the registration is
// never consulted.) PoolConfig and ConfigurePool register them on every
// connection; a single connection made from ConnConfig needs this call.
func RegisterExecTypes(conn *pgx.Conn) {
	conn.TypeMap().RegisterDefaultPgType(map[string]string(nil), "jsonb")
}

func registerExecTypes(_ context.Context, conn *pgx.Conn) error {
	RegisterExecTypes(conn)
	return nil
}

// urlParam returns the value of a parameter of a URL or keyword=value
// connection string, "" if it is not set.
func urlParam(connString, name string) string {
	for _, sep := range []string{"?", "&", " "} {
		if i := strings.Index(connString, sep+name+"="); i >= 0 {
			v := connString[i+len(sep)+len(name)+1:]
			if j := strings.IndexAny(v, "& "); j >= 0 {
				v = v[:j]
			}
			return v
		}
	}
	if strings.HasPrefix(connString, name+"=") {
		return urlParam(" "+connString, name)
	}
	return ""
}

// Setting is one server setting every phasepay session runs under.
type Setting struct {
	Name, Value string
	// Limit, for a timeout: its value. A session must not run with it
	// off (0), whatever other value an operator chose.
	Limit time.Duration
}

// Settings are the server settings of every phasepay session, from the
// constants of dbpool.go: startup parameters without a pooler, the
// database's defaults behind one.
var Settings = []Setting{
	{Name: "statement_timeout", Value: millis(StatementTimeoutDefault), Limit: StatementTimeoutDefault},
	{Name: "lock_timeout", Value: millis(LockTimeoutDefault), Limit: LockTimeoutDefault},
	{Name: "idle_in_transaction_session_timeout", Value: millis(IdleInTransactionTimeoutDefault), Limit: IdleInTransactionTimeoutDefault},
	{Name: "plan_cache_mode", Value: PlanCacheModeDefault},
}

func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Execer runs a statement: a *pgx.Conn, a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ApplySettings makes Settings the defaults of conn's database (ALTER
// DATABASE … SET), for every session that does not set its own: the way
// they hold behind a transaction pooler, which passes no startup
// parameter on. It needs the database's owner or a superuser. Operators'
// sessions on the database get them too; a role that needs others says so
// for itself (ALTER ROLE … IN DATABASE … SET), which takes precedence.
// `api migrate` runs it when DATABASE_POOLER=transaction.
func ApplySettings(ctx context.Context, conn *pgx.Conn) error {
	db := pgx.Identifier{conn.Config().Database}.Sanitize()
	for _, s := range Settings {
		stmt := "ALTER DATABASE " + db + " SET " + s.Name + " = " + quoteLiteral(s.Value)
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("set %s on database %s: %w", s.Name, db, err)
		}
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// checkSettingsSQL reads the settings the session runs under.
const checkSettingsSQL = `SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),
       current_setting('idle_in_transaction_session_timeout'), current_setting('plan_cache_mode')`

// ErrSettings: the session does not run under Settings.
var ErrSettings = errors.New("server settings not in effect")

// CheckSettings reads the settings a session of q runs under and fails
// with ErrSettings, saying how to fix it, unless every limit of Settings
// is on (any value but 0: an operator may choose other values for the
// database or role) and plan_cache_mode is PlanCacheModeDefault. Behind a
// transaction pooler the api and the reaper run it at start: without it
// a pooler that dropped the startup parameters would leave every
// statement unbounded, silently.
func CheckSettings(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) error {
	got := make([]string, len(Settings))
	dest := make([]any, len(got))
	for i := range got {
		dest[i] = &got[i]
	}
	if err := q.QueryRow(ctx, checkSettingsSQL).Scan(dest...); err != nil {
		return fmt.Errorf("read server settings: %w", err)
	}
	var wrong []string
	for i, s := range Settings {
		switch {
		case s.Limit > 0 && got[i] == "0":
			wrong = append(wrong, fmt.Sprintf("%s is off (phasepay's is %s)", s.Name, s.Limit))
		case s.Limit == 0 && got[i] != s.Value:
			wrong = append(wrong, fmt.Sprintf("%s is %s (want %s)", s.Name, got[i], s.Value))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %s; `api migrate` with DATABASE_POOLER=transaction sets them on the database (ALTER DATABASE … SET)",
			ErrSettings, strings.Join(wrong, ", "))
	}
	return nil
}
