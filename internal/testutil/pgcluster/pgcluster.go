// Package pgcluster runs a throw-away PostgreSQL server of its own: initdb
// into a temporary directory, a free port on 127.0.0.1, and a postmaster
// this process starts, stops (immediately, as a crash would) and starts
// again. Tests and the chaos harness use it to take the database away from
// running api and reaper processes, which must never be done to the shared
// server on 5432 that every other test uses.
//
// The postmaster is this process's child, started without pg_ctl, so that
// Stop is a signal and a Wait, and so that it dies with this process
// (Pdeathsig) instead of lingering after a test binary is killed. As root
// (initdb and postgres refuse to run as root) the server runs as the
// "postgres" user.
//
//	c, err := pgcluster.New(ctx, pgcluster.Config{})
//	defer c.Close()
//	url, err := c.CreateDatabase(ctx, "phasepay")
//	…
//	err = c.Stop()        // immediate: clients see their connections drop
//	err = c.Start(ctx)    // crash recovery, then accepting connections again
//
// In a test, ForTest does the same and registers Close with t.Cleanup.
package pgcluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDirDefault is where Debian's PostgreSQL 15 packages put initdb and
// postgres. PGCLUSTER_BIN overrides it.
const BinDirDefault = "/usr/lib/postgresql/15/bin"

// StartTimeoutDefault bounds how long Start waits for the server to accept
// connections, crash recovery included.
const StartTimeoutDefault = 60 * time.Second

// Config says how to build the cluster. The zero value is usable.
type Config struct {
	// BinDir holds initdb and postgres. Default: $PGCLUSTER_BIN, else
	// BinDirDefault.
	BinDir string
	// Port is the TCP port on 127.0.0.1. 0 picks a free one; it stays the
	// same across Stop and Start, so connection strings stay valid.
	Port int
	// Settings are extra postgresql.conf parameters (name → value, quoted
	// as needed by the caller), applied over the defaults below.
	Settings map[string]string
	// StartTimeout bounds each Start. Default StartTimeoutDefault.
	StartTimeout time.Duration
}

// defaultSettings make a disposable server quick without weakening what
// tests observe: fsync=off only matters when the machine itself crashes
// (an immediate stop of the server still finds every committed
// transaction in the kernel's page cache), while synchronous_commit stays
// on, since an immediate stop would lose commits still in WAL buffers.
var defaultSettings = map[string]string{
	"fsync":             "off",
	"full_page_writes":  "off",
	"max_connections":   "200",
	"shared_buffers":    "32MB",
	"listen_addresses":  "'127.0.0.1'",
	"log_min_messages":  "warning",
	"logging_collector": "off",
}

// Cluster is one throw-away server. Its methods are safe for concurrent use.
type Cluster struct {
	cfg     Config
	dir     string // the temporary directory: data/ and server.log
	dataDir string
	logPath string
	cred    *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// New initialises a cluster in a new temporary directory and starts it.
// Close stops it and removes the directory.
func New(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.BinDir = cmp.Or(cfg.BinDir, os.Getenv("PGCLUSTER_BIN"), BinDirDefault)
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, StartTimeoutDefault)
	if cfg.Port == 0 {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("pgcluster: free port: %w", err)
		}
		cfg.Port = port
	}
	c := &Cluster{cfg: cfg}
	if err := c.init(ctx); err != nil {
		c.removeDir()
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		c.removeDir()
		return nil, err
	}
	return c, nil
}

// ForTest returns a started cluster that is closed when the test ends.
func ForTest(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("pgcluster: %v", err)
		}
	})
	return c
}

func (c *Cluster) init(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	c.dir = dir
	c.dataDir = filepath.Join(dir, "data")
	c.logPath = filepath.Join(dir, "server.log")
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("pgcluster: running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, "initdb"),
		"-D", c.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	settings := map[string]string{
		"port":                    strconv.Itoa(c.cfg.Port),
		"unix_socket_directories": "'" + dir + "'",
	}
	for k, v := range defaultSettings {
		settings[k] = v
	}
	for k, v := range c.cfg.Settings {
		settings[k] = v
	}
	var conf bytes.Buffer
	for k, v := range settings {
		fmt.Fprintf(&conf, "%s = %s\n", k, v)
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(conf.Bytes()); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// Port returns the server's TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.cfg.Port }

// BinDir returns the directory of the server's binaries (initdb,
// postgres, pg_waldump).
func (c *Cluster) BinDir() string { return c.cfg.BinDir }

// DataDir returns the cluster's data directory (its pg_wal among it).
func (c *Cluster) DataDir() string { return c.dataDir }

// Dir returns the cluster's temporary directory (data/ and server.log).
func (c *Cluster) Dir() string { return c.dir }

// URL returns a connection string for database (user postgres, no
// password), in the pgx URL syntax the rest of phasepay uses.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.cfg.Port, database)
}

// CreateDatabase creates an empty database and returns its URL. The server
// must be running.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// Running reports whether the postmaster is up (started and not exited).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Start starts the server and waits until it accepts connections (after
// crash recovery, following an immediate Stop). Starting a running cluster
// is an error.
func (c *Cluster) Start(ctx context.Context) error {
	if c.Running() {
		return errors.New("pgcluster: already running")
	}
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	cmd := exec.Command(filepath.Join(c.cfg.BinDir, "postgres"), "-D", c.dataDir)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		// A killed test binary must not leave servers behind.
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	for {
		select {
		case <-done:
			return fmt.Errorf("pgcluster: postgres exited during start; log:\n%s", c.LogTail(4096))
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := ping(pctx, c.URL("postgres"))
		pcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			_ = c.stop(syscall.SIGQUIT)
			return fmt.Errorf("pgcluster: not ready within %s: %w; log:\n%s", c.cfg.StartTimeout, err, c.LogTail(4096))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops the server immediately (SIGQUIT): every connection drops at
// once and nothing is checkpointed, as in a crash; the next Start runs
// crash recovery. Stopping a stopped cluster does nothing.
func (c *Cluster) Stop() error { return c.stop(syscall.SIGQUIT) }

// StopFast stops the server the polite way (SIGINT, "fast" shutdown):
// sessions are ended and a checkpoint written.
func (c *Cluster) StopFast() error { return c.stop(syscall.SIGINT) }

func (c *Cluster) stop(sig syscall.Signal) error {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: stop: %w", err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		// Whatever the postmaster is doing, its process group goes.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	// Backends exit on their own once the postmaster is gone; the next
	// Start waits for them (postgres refuses to start while its old shared
	// memory is still attached), so wait here instead, briefly.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return nil
}

// Restart stops the server immediately, keeps it down for down, and starts
// it again.
func (c *Cluster) Restart(ctx context.Context, down time.Duration) error {
	if err := c.Stop(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return c.Start(ctx)
}

// Close stops the server and removes its directory.
func (c *Cluster) Close() error {
	err := c.Stop()
	c.removeDir()
	return err
}

func (c *Cluster) removeDir() {
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// LogTail returns up to the last n bytes of the server's log, for error
// messages.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// freePort asks the kernel for a free port. Another process could take it
// before the server binds it; Start then fails with the server's log.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
