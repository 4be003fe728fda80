package formation

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// service is one long-running pg_autoctl (a monitor's or a node's keeper,
// which starts and supervises its PostgreSQL) in a process group of its
// own: kill is SIGKILL to the whole group, the keeper and its server alike.
type service struct {
	name string
	args []string
	dir  string
	env  []string
	cred *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer
}

// newService returns the service of pgdata (`pg_autoctl run`), or, with
// args, of that command (the standby's `create postgres … --run`).
func (f *Formation) newService(name, pgdata string, args ...string) *service {
	if len(args) == 0 {
		args = []string{"run", "--pgdata", pgdata}
	}
	return &service{name: name, args: args, dir: f.dir, env: f.env, cred: f.cred}
}

func (s *service) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.Write(b)
}

func (s *service) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command("pg_autoctl", s.args...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s, s
	// Pdeathsig reaches the keeper only: a formation whose harness was
	// killed loses its keepers, and their servers, orphaned, are stopped
	// by nobody; Stop kills the groups.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("formation: start %s: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	return nil
}

// kill sends SIGKILL to the service's process group and waits for the
// keeper to exit.
func (s *service) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func (s *service) logTail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return lastLines(s.logs.String(), n)
}

// postmasterPID reads the postmaster's pid from pgdata, 0 if none.
func postmasterPID(pgdata string) int {
	b, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// killPostmaster sends SIGKILL to pgdata's postmaster, if it runs: kill -9,
// as a crash of the server would.
func killPostmaster(pgdata string) {
	if pid := postmasterPID(pgdata); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// autoctl runs one pg_autoctl command to its end and returns its output.
func (f *Formation) autoctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "pg_autoctl", args...)
	cmd.Dir = f.dir
	cmd.Env = f.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred, Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("formation: pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, lastLines(out.String(), 15))
	}
	return out.String(), nil
}

// appendSettings adds settings at the end of pgdata's postgresql.conf,
// after pg_autoctl's include of postgresql-auto-failover.conf, so that
// they win over its own.
func appendSettings(pgdata string, settings map[string]string) error {
	var b bytes.Buffer
	b.WriteString("\n# tools/formation\n")
	for k, v := range settings {
		fmt.Fprintf(&b, "%s = %s\n", k, v)
	}
	fh, err := os.OpenFile(filepath.Join(pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	defer fh.Close()
	if _, err := fh.Write(b.Bytes()); err != nil {
		return fmt.Errorf("formation: %w", err)
	}
	return nil
}
