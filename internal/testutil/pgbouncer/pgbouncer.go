// Package pgbouncer runs a throw-away PgBouncer in transaction mode in front
// of a PostgreSQL server: its own configuration and auth file in a
// temporary directory, a free port on 127.0.0.1, and a pgbouncer process
// this process starts and stops. Tests, the chaos harness and the
// benchmark put it between phasepay and the database to run phasepay as a
// deployment behind a transaction pooler would (docs/operations.md,
// "Behind a pooler").
//
// The binary is $PGBOUNCER, else pgbouncer on PATH or in /usr/sbin (Debian's
// package). When none is found, the repository's scripts/install-pgbouncer
// installs it, as `make test` does before any test runs; a pooler test
// never skips for want of one.
//
//	b, err := pgbouncer.Start(ctx, pgbouncer.Config{Server: dbURL})
//	defer b.Close()
//	pooled := b.URL(dbURL) // the same database, user and parameters, through the pooler
//
// In a test, ForTest does the same and registers Close with t.Cleanup.
package pgbouncer

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of Config.
const (
	// PoolSizeDefault is the server connections per database and user:
	// fewer than the api's pool (dbpool.PoolMaxConnsDefault), as in a
	// deployment where many api processes share a few server connections.
	PoolSizeDefault = 10
	// QueryWaitTimeoutDefault bounds how long a client's query waits for
	// a server connection (query_wait_timeout). PgBouncer's own default,
	// 120 s, holds every request for two minutes while the database is
	// down; the contract answers 503 within 5 s.
	QueryWaitTimeoutDefault = 3 * time.Second
	// StartTimeout bounds how long Start waits for the pooler to listen.
	StartTimeout = 10 * time.Second
)

// Config says what to put the pooler in front of. Server is required.
type Config struct {
	// Server is a connection string of the PostgreSQL server (URL or
	// keyword=value): its host and port are where the pooler connects,
	// for every database, as the user the client names. Its user must
	// log in without a password (trust), as on the test servers.
	Server string
	// PoolMode is pool_mode. Default "transaction": what phasepay's
	// DATABASE_POOLER=transaction declares.
	PoolMode string
	// PoolSize is default_pool_size. Default PoolSizeDefault.
	PoolSize int
	// QueryWaitTimeout is query_wait_timeout (whole seconds). Default
	// QueryWaitTimeoutDefault.
	QueryWaitTimeout time.Duration
	// Settings are extra [pgbouncer] settings (name → value), applied
	// last.
	Settings map[string]string
	// Bin is the pgbouncer binary. Default: see the package comment.
	Bin string
}

// Bouncer is one running pgbouncer.
type Bouncer struct {
	cfg     Config
	dir     string
	port    int
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start writes the pooler's configuration into a new temporary directory
// and starts it. Close stops it and removes the directory.
func Start(ctx context.Context, cfg Config) (*Bouncer, error) {
	if cfg.Server == "" {
		return nil, errors.New("pgbouncer: Config.Server is required")
	}
	server, err := pgconn.ParseConfig(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: server: %w", err)
	}
	cfg.PoolMode = cmp.Or(cfg.PoolMode, "transaction")
	cfg.PoolSize = cmp.Or(cfg.PoolSize, PoolSizeDefault)
	cfg.QueryWaitTimeout = cmp.Or(cfg.QueryWaitTimeout, QueryWaitTimeoutDefault)
	if cfg.Bin == "" {
		if cfg.Bin, err = Binary(); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: free port: %w", err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	b := &Bouncer{cfg: cfg, dir: dir, port: port, logPath: filepath.Join(dir, "pgbouncer.log")}
	cred, err := b.write(server)
	if err == nil {
		err = b.start(ctx, cred)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// ForTest returns a started pooler that is closed when the test ends.
func ForTest(t testing.TB, cfg Config) *Bouncer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("pgbouncer: %v", err)
		}
		if t.Failed() {
			t.Logf("pgbouncer log (tail):\n%s", b.LogTail(4096))
		}
	})
	return b
}

// write writes pgbouncer.ini and the auth file, readable by the user the
// pooler runs as: PgBouncer refuses to run as root, so as root it runs as
// the postgres user, as internal/testutil/pgcluster runs the server.
func (b *Bouncer) write(server *pgconn.Config) (*syscall.Credential, error) {
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgbouncer: running as root needs a postgres user to run as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(b.dir, int(uid), int(gid)); err != nil {
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	users := filepath.Join(b.dir, "userlist.txt")
	// auth_type trust still wants every user listed; the server's own
	// authentication (trust, on test servers) admits the pooler.
	if err := os.WriteFile(users, []byte(`"`+server.User+`" ""`+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	settings := map[string]string{
		"listen_addr":        "127.0.0.1",
		"listen_port":        strconv.Itoa(b.port),
		"unix_socket_dir":    "",
		"auth_type":          "trust",
		"auth_file":          users,
		"admin_users":        server.User,
		"pool_mode":          b.cfg.PoolMode,
		"default_pool_size":  strconv.Itoa(b.cfg.PoolSize),
		"max_client_conn":    "1000",
		"query_wait_timeout": strconv.Itoa(max(1, int(b.cfg.QueryWaitTimeout.Round(time.Second).Seconds()))),
		// After a failed login to a restarting server, retry in a second,
		// not PgBouncer's default 15.
		"server_login_retry": "1",
		"logfile":            b.logPath,
		"log_connections":    "0",
		"log_disconnections": "0",
	}
	for k, v := range b.cfg.Settings {
		settings[k] = v
	}
	var ini bytes.Buffer
	fmt.Fprintf(&ini, "[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", server.Host, server.Port)
	for k, v := range settings {
		fmt.Fprintf(&ini, "%s = %s\n", k, v)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), ini.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("pgbouncer: %w", err)
	}
	if cred != nil {
		for _, f := range []string{users, filepath.Join(b.dir, "pgbouncer.ini")} {
			if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, fmt.Errorf("pgbouncer: %w", err)
			}
		}
	}
	return cred, nil
}

func (b *Bouncer) start(ctx context.Context, cred *syscall.Credential) error {
	cmd := exec.Command(b.cfg.Bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.Dir = b.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		// A killed test binary must not leave poolers behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgbouncer: start %s: %w", b.cfg.Bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	b.mu.Lock()
	b.cmd, b.done = cmd, done
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for {
		select {
		case <-done:
			return fmt.Errorf("pgbouncer: exited during start: %s%s", out.String(), b.LogTail(2048))
		default:
		}
		c, err := net.DialTimeout("tcp", b.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			_ = b.Close()
			return fmt.Errorf("pgbouncer: not listening within %s: %w; log:\n%s", StartTimeout, err, b.LogTail(2048))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addr is the pooler's host:port.
func (b *Bouncer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// URL returns dbURL (a postgres:// URL) with its host and port replaced by
// the pooler's: the same database, user and parameters, through the
// pooler.
func (b *Bouncer) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		panic(fmt.Sprintf("pgbouncer: URL %q: %v", dbURL, err))
	}
	u.Host = b.Addr()
	return u.String()
}

// Exec runs a command of PgBouncer's admin console (SHOW POOLS, RELOAD,
// PAUSE, …) and returns its rows as text.
func (b *Bouncer) Exec(ctx context.Context, user, command string) ([][]string, error) {
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://%s@%s/pgbouncer?sslmode=disable", user, b.Addr()))
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	results, err := conn.Exec(ctx, command).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("pgbouncer admin %q: %w", command, err)
	}
	var rows [][]string
	for _, r := range results {
		for _, row := range r.Rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = string(c)
			}
			rows = append(rows, cells)
		}
	}
	return rows, nil
}

// Close stops the pooler (SIGINT: close every connection at once) and
// removes its directory. Safe to call twice.
func (b *Bouncer) Close() error {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if b.dir != "" {
		return os.RemoveAll(b.dir)
	}
	return nil
}

// LogTail returns up to the last n bytes of the pooler's log.
func (b *Bouncer) LogTail(n int) string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return ""
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary finds the pgbouncer binary, installing it with the repository's
// scripts/install-pgbouncer when it is missing (once per process).
func Binary() (string, error) {
	binOnce.Do(func() {
		if binPath = find(); binPath != "" {
			return
		}
		script, err := installScript()
		if err != nil {
			binErr = fmt.Errorf("pgbouncer is not installed, and %w", err)
			return
		}
		out, err := exec.Command(script).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("pgbouncer is not installed: %s: %w: %s", script, err, strings.TrimSpace(string(out)))
			return
		}
		if binPath = find(); binPath == "" {
			binErr = fmt.Errorf("pgbouncer: %s ran, but no pgbouncer binary is found", script)
		}
	})
	return binPath, binErr
}

func find() string {
	if p := os.Getenv("PGBOUNCER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// installScript finds scripts/install-pgbouncer in the repository that
// holds the working directory (a test runs in its package's directory).
func installScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "install-pgbouncer")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/install-pgbouncer is not found above the working directory: run it, or set PGBOUNCER")
		}
		dir = parent
	}
}

// freePort asks the kernel for a free port. Another process could take it
// before the pooler binds it; Start then fails with the pooler's log.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
