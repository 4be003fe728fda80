// Package formation runs a throw-away pg_auto_failover formation on this
// machine: a monitor and two data nodes (a primary and a hot standby that
// takes over when it fails), each on a free port of 127.0.0.1, in a
// temporary directory, under this process. `make failover` points api
// processes and reapers at it with the multi-host connection string and
// makes the primary fail while they serve; a test may do the same to a
// pool. The shared server on 5432 is never touched.
//
//	f, err := formation.Start(ctx, formation.Config{})
//	defer f.Stop()
//	url := f.URL()                         // postgres://127.0.0.1:p1,127.0.0.1:p2/phasepay?target_session_attrs=read-write
//	fo, err := f.Kill(ctx, formation.KillOptions{}) // kill -9 of the primary: its postmaster and its pg_autoctl
//	fo, err = f.Switchover(ctx)            // pg_autoctl perform switchover
//
// Each node is a `pg_autoctl run` (the keeper, which runs its PostgreSQL)
// started as a child of this process in a process group of its own, so that
// Kill is a signal to the group and Stop leaves nothing behind. As root
// (PostgreSQL refuses to run as root) everything runs as the "postgres" user,
// as in internal/testutil/pgcluster. pg_autoctl keeps its state and
// configuration under XDG_CONFIG_HOME and XDG_DATA_HOME, set inside the
// temporary directory so that formations never see each other.
//
// Debian's pg-auto-failover-cli and postgresql-15-auto-failover provide
// pg_autoctl and the monitor's extension (scripts/install-pg-auto-failover).
//
// # Synchronous or not
//
// pg_auto_failover 2.0 makes replication synchronous by itself: a standby
// with replication-quorum true (the default) is named in the primary's
// synchronous_standby_names (ANY 1 (pgautofailover_standby_2)), whatever
// the formation's number-sync-standbys, which only says how many standbys
// must be up for the primary to keep accepting writes (0: it goes on alone,
// asynchronously, when its standby is gone). Config.Async sets
// replication-quorum false on both nodes (`pg_autoctl set node
// replication-quorum false`): the monitor then leaves
// synchronous_standby_names empty, and a commit returns as soon as it is
// flushed on the primary. Both nodes keep candidate priority 50, so either
// may be promoted in both modes.
package formation

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// BinDirDefault is where Debian's PostgreSQL 15 packages put pg_ctl and
// postgres; PGCLUSTER_BIN overrides it, as for internal/testutil/pgcluster.
const BinDirDefault = "/usr/lib/postgresql/15/bin"

// Config says how to build the formation. The zero value is usable.
type Config struct {
	// BinDir holds pg_ctl and postgres. Default $PGCLUSTER_BIN, else
	// BinDirDefault.
	BinDir string
	// Database is the database the data nodes serve. Default "phasepay".
	Database string
	// Async disables synchronous replication (see the package comment).
	Async bool
	// Settings are extra postgresql.conf parameters of the data nodes
	// (name → value, quoted as needed by the caller), over the defaults
	// below.
	Settings map[string]string
	// Timeout bounds Start and each failover. Default 3 minutes.
	Timeout time.Duration
	// Log, if set, receives a line per step.
	Log func(format string, args ...any)
}

// nodeSettings keep three servers small on a small machine: pg_autoctl
// sizes shared_buffers from the machine's memory (6 GB each on 24 GB).
// fsync=off, as in internal/testutil/pgcluster, only matters when the machine
// itself crashes: a killed postmaster's commits are in the page cache.
// full_page_writes stays on (pg_rewind, which brings a failed primary back
// as a standby, needs it), and so does synchronous_commit.
var nodeSettings = map[string]string{
	"shared_buffers":       "'64MB'",
	"work_mem":             "'4MB'",
	"maintenance_work_mem": "'64MB'",
	"effective_cache_size": "'1GB'",
	"max_connections":      "300",
	"fsync":                "off",
	"logging_collector":    "off",
	"log_min_messages":     "warning",
}

// monitorSettings make the monitor notice a dead primary in about two
// seconds instead of about thirty: a health check every second
// (default 5 s), a node unhealthy after 2 s without answering (20 s), and
// the wait for a primary that cannot be reached to demote itself cut to
// 3 s (30 s). Production keeps the defaults, which a network blip must
// not trip; the formation is alone on loopback.
var monitorSettings = map[string]string{
	"shared_buffers":                                   "'32MB'",
	"listen_addresses":                                 "'127.0.0.1'",
	"logging_collector":                                "off",
	"log_min_messages":                                 "warning",
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "2000",
	"pgautofailover.primary_demote_timeout":            "3000",
}

// Formation is one running formation. Its methods are safe for concurrent
// use, but failovers must not overlap.
type Formation struct {
	cfg  Config
	dir  string
	env  []string
	cred *syscall.Credential

	monitor     *service
	monitorPort int
	monitorDir  string
	nodes       [2]*Node

	mu sync.Mutex // serialises failovers and Stop
}

// Node is one data node.
type Node struct {
	Name string
	Port int
	dir  string // PGDATA
	svc  *service
}

// Addr is the node's host:port.
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// Start builds and starts a formation in a new temporary directory: the
// monitor, a primary, and a standby cloned from it; it returns when the
// standby is a secondary and replication is as Config.Async says. Stop
// stops it and removes the directory, also when Start fails.
func Start(ctx context.Context, cfg Config) (_ *Formation, err error) {
	cfg.BinDir = cmp.Or(cfg.BinDir, os.Getenv("PGCLUSTER_BIN"), BinDirDefault)
	cfg.Database = cmp.Or(cfg.Database, "phasepay")
	cfg.Timeout = cmp.Or(cfg.Timeout, 3*time.Minute)
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		return nil, fmt.Errorf("formation: pg_autoctl not found (run scripts/install-pg-auto-failover): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	f := &Formation{cfg: cfg}
	defer func() {
		if err != nil {
			_ = f.Stop()
		}
	}()
	if err := f.init(); err != nil {
		return nil, err
	}
	if err := f.startMonitor(ctx); err != nil {
		return nil, err
	}
	if err := f.startNodes(ctx); err != nil {
		return nil, err
	}
	if cfg.Async {
		for _, n := range f.nodes {
			if _, err := f.autoctl(ctx, "set", "node", "replication-quorum", "false", "--pgdata", n.dir); err != nil {
				return nil, err
			}
		}
	}
	if err := f.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Formation) init() error {
	dir, err := os.MkdirTemp("", "formation-")
	if err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	f.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("formation: running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		f.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return fmt.Errorf("formation: %w", err)
		}
	}
	f.env = append(os.Environ(),
		"PATH="+f.cfg.BinDir+":"+os.Getenv("PATH"),
		"HOME="+dir,
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "share"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"),
		"PGHOST=127.0.0.1",
	)
	return nil
}

// startMonitor creates the monitor, tunes it (monitorSettings) and runs it.
func (f *Formation) startMonitor(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	f.monitorPort = port
	pgdata := filepath.Join(f.dir, "monitor")
	f.monitorDir = pgdata
	if _, err := f.autoctl(ctx, "create", "monitor", "--pgdata", pgdata, "--pgport", strconv.Itoa(port),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"); err != nil {
		return err
	}
	if err := appendSettings(pgdata, monitorSettings); err != nil {
		return err
	}
	f.monitor = f.newService("monitor", pgdata)
	if err := f.monitor.start(); err != nil {
		return err
	}
	f.cfg.Log("formation: monitor on 127.0.0.1:%d", port)
	return waitFor(ctx, "the monitor", func() error { return ping(ctx, f.MonitorURL()) })
}

// MonitorURL is the monitor's database, as the postgres user.
func (f *Formation) MonitorURL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", f.monitorPort)
}

// startNodes creates the primary (tuned with nodeSettings, which the
// standby's base backup copies), runs it, then creates and runs the
// standby.
func (f *Formation) startNodes(ctx context.Context) error {
	monitor := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitorPort)
	settings := map[string]string{}
	for k, v := range nodeSettings {
		settings[k] = v
	}
	for k, v := range f.cfg.Settings {
		settings[k] = v
	}
	for i := range f.nodes {
		port, err := freePort()
		if err != nil {
			return err
		}
		n := &Node{Name: fmt.Sprintf("node%d", i+1), Port: port, dir: filepath.Join(f.dir, fmt.Sprintf("node%d", i+1))}
		f.nodes[i] = n
		args := []string{"create", "postgres", "--pgdata", n.dir, "--pgport", strconv.Itoa(port), "--listen", "127.0.0.1",
			"--hostname", "127.0.0.1", "--name", n.Name, "--dbname", f.cfg.Database, "--monitor", monitor,
			"--auth", "trust", "--no-ssl"}
		n.svc = f.newService(n.Name, n.dir)
		if i == 0 {
			if _, err := f.autoctl(ctx, args...); err != nil {
				return err
			}
			if err := appendSettings(n.dir, settings); err != nil {
				return err
			}
			if err := n.svc.start(); err != nil {
				return err
			}
			if err := f.waitStates(ctx, map[string]string{n.Name: "single"}); err != nil {
				return err
			}
			f.cfg.Log("formation: %s on %s, primary", n.Name, n.Addr())
			continue
		}
		// The standby: create runs pg_basebackup from the primary, then
		// the keeper (--run). The base backup starts with a checkpoint
		// that pg_autoctl does not ask to be fast: spread over
		// checkpoint_completion_target, it took minutes; a CHECKPOINT on
		// the primary makes it immediate.
		n.svc = f.newService(n.Name, "", append(args, "--run")...)
		if err := n.svc.start(); err != nil {
			return err
		}
		primary := f.nodes[0]
		err = waitFor(ctx, n.Name+" to become a secondary", func() error {
			st, err := f.States(ctx)
			if err != nil {
				return err
			}
			if st[n.Name].Reported == "secondary" {
				return nil
			}
			_ = exec1(ctx, primaryURL(primary, "postgres"), "CHECKPOINT")
			return fmt.Errorf("%s is %s", n.Name, st[n.Name].Reported)
		})
		if err != nil {
			return fmt.Errorf("%w\n%s", err, n.svc.logTail(20))
		}
		f.cfg.Log("formation: %s on %s, standby", n.Name, n.Addr())
	}
	return nil
}

// URL is the formation's multi-host connection string: both data nodes,
// with target_session_attrs=read-write, so that a client connects to
// whichever is the primary now.
func (f *Formation) URL() string {
	return fmt.Sprintf("postgres://postgres@%s,%s/%s?sslmode=disable&target_session_attrs=read-write",
		f.nodes[0].Addr(), f.nodes[1].Addr(), f.cfg.Database)
}

// Nodes returns the two data nodes.
func (f *Formation) Nodes() []*Node { return f.nodes[:] }

// Dir is the formation's temporary directory.
func (f *Formation) Dir() string { return f.dir }

// Async reports whether replication is asynchronous.
func (f *Formation) Async() bool { return f.cfg.Async }

// Stop stops every node and the monitor (SIGKILL to each process group:
// nothing of the formation is worth a clean shutdown) and removes the
// directory. Stopping twice is harmless.
func (f *Formation) Stop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n != nil && n.svc != nil {
			n.svc.kill()
			killPostmaster(n.dir)
		}
	}
	if f.monitor != nil {
		f.monitor.kill()
		killPostmaster(filepath.Join(f.dir, "monitor"))
	}
	if f.dir != "" {
		// Backends of a killed postmaster exit by themselves, soon.
		time.Sleep(200 * time.Millisecond)
		if err := os.RemoveAll(f.dir); err != nil {
			return fmt.Errorf("formation: %w", err)
		}
		f.dir = ""
	}
	return nil
}
