package formation

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// State is a node's state as the monitor sees it: the state its keeper
// last reported, and the one the monitor assigned it.
type State struct {
	Reported, Assigned string
}

// statesSQL reads the formation's nodes from the monitor.
const statesSQL = `SELECT nodename, reportedstate::text, goalstate::text
  FROM pgautofailover.node WHERE formationid = 'default'`

// States returns each node's state, by name.
func (f *Formation) States(ctx context.Context) (map[string]State, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.MonitorURL())
	if err != nil {
		return nil, fmt.Errorf("formation: monitor: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, statesSQL)
	if err != nil {
		return nil, fmt.Errorf("formation: monitor: %w", err)
	}
	out := map[string]State{}
	for rows.Next() {
		var name string
		var st State
		if err := rows.Scan(&name, &st.Reported, &st.Assigned); err != nil {
			return nil, fmt.Errorf("formation: monitor: %w", err)
		}
		out[name] = st
	}
	return out, rows.Err()
}

// waitStates waits until every named node has reported and been assigned
// the state given.
func (f *Formation) waitStates(ctx context.Context, want map[string]string) error {
	return waitFor(ctx, fmt.Sprint(want), func() error {
		st, err := f.States(ctx)
		if err != nil {
			return err
		}
		for name, w := range want {
			if got := st[name]; got.Reported != w || got.Assigned != w {
				return fmt.Errorf("%s is %s (assigned %s), want %s", name, got.Reported, got.Assigned, w)
			}
		}
		return nil
	})
}

// Primary returns the node that is the primary now (reported and assigned
// primary, or wait_primary: accepting writes without a standby), or an
// error if none is.
func (f *Formation) Primary(ctx context.Context) (*Node, error) {
	st, err := f.States(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range f.nodes {
		if s := st[n.Name]; s.Reported == s.Assigned && (s.Reported == "primary" || s.Reported == "wait_primary") {
			return n, nil
		}
	}
	return nil, fmt.Errorf("formation: no primary: %v", st)
}

func (f *Formation) other(n *Node) *Node {
	if n == f.nodes[0] {
		return f.nodes[1]
	}
	return f.nodes[0]
}

// WaitHealthy waits until one node is the primary and the other its
// secondary, and the primary's synchronous_standby_names says what
// Config.Async asks: the state every failover starts from.
func (f *Formation) WaitHealthy(ctx context.Context) error {
	return waitFor(ctx, "a primary and a secondary", func() error {
		p, err := f.Primary(ctx)
		if err != nil {
			return err
		}
		st, err := f.States(ctx)
		if err != nil {
			return err
		}
		if s := st[f.other(p).Name]; s.Reported != "secondary" || s.Assigned != "secondary" || st[p.Name].Reported != "primary" {
			return fmt.Errorf("states %v", st)
		}
		names, err := f.setting(ctx, p, "synchronous_standby_names")
		if err != nil {
			return err
		}
		if (names == "") != f.cfg.Async {
			return fmt.Errorf("%s: synchronous_standby_names = %q with Async %v", p.Name, names, f.cfg.Async)
		}
		return nil
	})
}

// SynchronousStandbyNames returns the primary's synchronous_standby_names.
func (f *Formation) SynchronousStandbyNames(ctx context.Context) (string, error) {
	p, err := f.Primary(ctx)
	if err != nil {
		return "", err
	}
	return f.setting(ctx, p, "synchronous_standby_names")
}

func (f *Formation) setting(ctx context.Context, n *Node, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primaryURL(n, "postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}

// Failover is one failure of the primary, as the formation made it.
type Failover struct {
	// Kind is "kill" (kill -9) or "switchover".
	Kind string `json:"kind"`
	// From and To name the primary before and after.
	From string `json:"from"`
	To   string `json:"to"`
	// Started is when the primary was made to fail; Promoted is when the
	// monitor first reported the other node accepting writes.
	Started  time.Time `json:"started"`
	Promoted time.Time `json:"promoted"`
	// Lag is how long the primary's WAL senders were held stopped just
	// before a kill (KillOptions.Lag): the replication lag the crash met.
	Lag time.Duration `json:"lag_ns,omitempty"`
	// Unreplicated is, for a kill, how many bytes of WAL the primary had
	// written and the standby not received when the primary died: lost
	// at the promotion (asynchronous), or never acknowledged to a client
	// (synchronous). -1 if it could not be read.
	Unreplicated int64 `json:"unreplicated_wal_bytes"`
}

// KillOptions shape a kill.
type KillOptions struct {
	// Lag, if set, stops the primary's WAL senders (SIGSTOP) this long
	// before the primary is killed: the standby then lacks whatever the
	// primary committed meanwhile, as a standby behind by a network stall
	// would. With synchronous replication those commits wait for the
	// standby and are never acknowledged; without, they are acknowledged
	// and lost at the promotion. (Stopping the standby's WAL receiver
	// instead loses nothing: the kernel keeps receiving into its socket
	// buffer, and the receiver reads it all once it goes on.)
	Lag time.Duration
	// Killed, if set, is called as soon as the primary is killed, before
	// the promotion: for a fault that must start with the crash.
	Killed func()
}

// Kill makes the primary fail as a crashed machine would: kill -9 of its
// postmaster and of its pg_autoctl keeper (the whole process group), so
// that nobody restarts it in place; the monitor notices, promotes the
// standby, and Kill returns once the standby accepts writes. The dead node
// is then started again (`pg_autoctl run`): it rejoins as a standby
// (pg_rewind) by itself, which WaitHealthy waits for.
//
// Why the keeper too: kill -9 of the postmaster alone races with the
// keeper, which restarts its server within a second or two; sometimes the
// monitor heard of the death first and failed over, sometimes the same
// node came back as the primary and nothing failed over.
func (f *Formation) Kill(ctx context.Context, opts KillOptions) (Failover, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	old, err := f.Primary(ctx)
	if err != nil {
		return Failover{}, err
	}
	standby := f.other(old)
	fo := Failover{Kind: "kill", From: old.Name, To: standby.Name, Lag: opts.Lag}
	var senders []int
	if opts.Lag > 0 {
		if senders, err = walSenderPIDs(ctx, old); err != nil {
			return fo, err
		}
		for _, pid := range senders {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		select {
		case <-ctx.Done():
			for _, pid := range senders {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
			return fo, ctx.Err()
		case <-time.After(opts.Lag):
		}
	}
	fo.Unreplicated = unreplicated(ctx, old, standby)
	fo.Started = time.Now()
	killPostmaster(old.dir)
	old.svc.kill()
	killPostmaster(old.dir)
	for _, pid := range senders {
		// Stopped, they would not notice their postmaster's death.
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	f.cfg.Log("formation: killed %s (kill -9 of its postmaster and keeper)", old.Name)
	if opts.Killed != nil {
		opts.Killed()
	}
	if err := f.awaitPromotion(ctx, standby, &fo); err != nil {
		return fo, err
	}
	// The old primary comes back as a standby, by itself.
	old.svc = f.newService(old.Name, old.dir)
	if err := old.svc.start(); err != nil {
		return fo, err
	}
	return fo, nil
}

// Switchover makes the primary fail the planned way: `pg_autoctl perform
// switchover`, which drains and demotes the primary and promotes the
// standby. It returns once the command has, with the roles swapped.
func (f *Formation) Switchover(ctx context.Context) (Failover, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	old, err := f.Primary(ctx)
	if err != nil {
		return Failover{}, err
	}
	fo := Failover{Kind: "switchover", From: old.Name, To: f.other(old).Name, Started: time.Now(), Unreplicated: -1}
	promoted := make(chan error, 1)
	go func() { promoted <- f.awaitPromotion(ctx, f.other(old), &fo) }()
	if _, err := f.autoctl(ctx, "perform", "switchover", "--pgdata", f.monitorDir, "--wait", "120"); err != nil {
		return fo, err
	}
	if err := <-promoted; err != nil {
		return fo, err
	}
	f.cfg.Log("formation: switchover %s → %s", fo.From, fo.To)
	return fo, nil
}

// awaitPromotion waits until n is the primary and records when.
func (f *Formation) awaitPromotion(ctx context.Context, n *Node, fo *Failover) error {
	err := waitFor(ctx, n.Name+" to be promoted", func() error {
		p, err := f.Primary(ctx)
		if err != nil {
			return err
		}
		if p != n {
			return fmt.Errorf("%s is still the primary", p.Name)
		}
		return nil
	})
	fo.Promoted = time.Now()
	return err
}

// walSenderPIDs returns the pids of the WAL senders of n, the primary.
func walSenderPIDs(ctx context.Context, n *Node) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primaryURL(n, "postgres"))
	if err != nil {
		return nil, fmt.Errorf("formation: %s: %w", n.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_replication`)
	if err != nil {
		return nil, fmt.Errorf("formation: %s: WAL senders: %w", n.Name, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err == nil && len(pids) == 0 {
		err = fmt.Errorf("formation: %s has no WAL sender", n.Name)
	}
	return pids, err
}

// unreplicated returns how many bytes of WAL primary has written that
// standby has not received, -1 if either cannot say.
func unreplicated(ctx context.Context, primary, standby *Node) int64 {
	read := func(n *Node, sql string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, primaryURL(n, "postgres"))
		if err != nil {
			return "", err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		var lsn string
		return lsn, conn.QueryRow(ctx, sql).Scan(&lsn)
	}
	// The standby first: what the primary writes meanwhile only makes the
	// difference larger, never smaller than what is lost.
	received, err := read(standby, `SELECT coalesce(pg_last_wal_receive_lsn(), '0/0')::text`)
	if err != nil {
		return -1
	}
	written, err := read(primary, `SELECT pg_current_wal_lsn()::text`)
	if err != nil {
		return -1
	}
	w, r := parseLSN(written), parseLSN(received)
	if w < 0 || r < 0 {
		return -1
	}
	return max(w-r, 0)
}

// parseLSN parses a pg_lsn ("16/B374D848"), -1 if it is not one.
func parseLSN(s string) int64 {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return -1
	}
	return int64(hi)<<32 | int64(lo)
}
