// Package procs runs phasepay's binaries for the harnesses (tools/chaos,
// tools/soak): it builds them, starts each as a supervised process that
// is restarted whenever it dies and whose every exit is judged planned or
// not, and spreads a client's attempts over several of them. It holds what
// the chaos harness wrote for itself, moved here when the soak needed the
// same.
package procs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles api, reaper and mockpsp into dir with the build tags given
// (the chaos harness's "chaos", which enables PHASEPAY_CHAOS_CRASH and
// PHASEPAY_CHAOS_DEFECT, package internal/testutil/faults; none for the
// production build). moduleDir is the repository root.
func Build(ctx context.Context, moduleDir, dir, tags string) error {
	for _, name := range []string{"api", "reaper", "mockpsp"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = moduleDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s (tags %s): %w\n%s", name, tags, err, out)
		}
	}
	return nil
}

// Binaries returns dir when it is set (binaries built already), or builds
// api, reaper and mockpsp with tags (Build) into a temporary directory of
// the repository the go command runs in, which cleanup removes. It says
// what it builds on progress.
func Binaries(ctx context.Context, dir, tags string, progress io.Writer) (_ string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if dir, err = os.MkdirTemp("", "phasepay-bin-"); err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	fmt.Fprintf(progress, "building api, reaper, mockpsp (tags %q)\n", tags)
	if err := Build(ctx, root, dir, tags); err != nil {
		cleanup()
		return "", nil, err
	}
	return dir, cleanup, nil
}

// Process is one supervised binary: restarted after it dies until Stop.
//
// Every exit is either planned — the harness killed it (signal SIGKILL, or
// stop), or it crashed itself at a chaos crash point, which it logs first —
// or unplanned: it exited by itself, e.g. because the database went away.
// Unplanned exits are violations; the supervisor still restarts the
// process so the run can go on and show everything else it finds.
type Process struct {
	name string
	bin  string
	args []string
	env  []string

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{}
	logs      bytes.Buffer // every incarnation's stderr
	logStart  int          // where the current incarnation's output starts in logs
	killed    bool         // the harness sent the current incarnation SIGKILL
	restarts  int
	stopped   bool
	paused    bool
	unplanned []string // one line per unplanned exit: how, and its last log lines
}

// New returns a process that runs bin with args, in this process's
// environment plus env; Start starts it.
func New(name, bin string, env map[string]string, args ...string) *Process {
	p := &Process{name: name, bin: bin, args: args, env: os.Environ()}
	for k, v := range env {
		p.env = append(p.env, k+"="+v)
	}
	return p
}

// Name is the name the process was created with.
func (p *Process) Name() string { return p.name }

// Write collects stderr; it is called by exec's copying goroutine.
func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

// Start starts an incarnation of the process.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stderr = p
	cmd.Stdout = p
	// Killed with the harness, even by SIGKILL: a leftover api or reaper
	// would keep retrying a database that is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.killed, p.logStart = cmd, done, false, false, p.logs.Len()
	go func() {
		// Wait returns after the output is copied, so the incarnation's
		// last words are in logs when it is judged.
		_ = cmd.Wait()
		p.judgeExit(cmd.ProcessState)
		close(done)
	}()
	return nil
}

// judgeExit records an exit the harness did not cause.
func (p *Process) judgeExit(st *os.ProcessState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.logs.String()[p.logStart:]
	ws, _ := st.Sys().(syscall.WaitStatus)
	sigkill := ws.Signaled() && ws.Signal() == syscall.SIGKILL
	switch {
	case p.stopped:
		return // stop: the end of the run
	case p.killed && sigkill:
		return // a kill of the harness's
	case sigkill && strings.Contains(out, `"msg":"chaos crash"`):
		return // a crash point of the chaos build
	}
	p.unplanned = append(p.unplanned, fmt.Sprintf("%s (pid %d) exited by itself at %s: %s; last output: %s",
		p.name, st.Pid(), time.Now().UTC().Format("15:04:05.000"), st, LastLines(out, 3)))
}

// Done is closed when the current incarnation has exited.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Pid is the current incarnation's process id; 0 before Start.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Restarts is how many times the supervisor has started the process again.
func (p *Process) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Paused reports whether the current incarnation was sent SIGSTOP and not
// yet SIGCONT.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// UnplannedExits returns the unplanned exits so far.
func (p *Process) UnplannedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unplanned...)
}

// LastLines returns the last n lines of s on one line, for messages.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// Supervise restarts the process whenever it exits, until Stop; run it in
// a goroutine of its own.
func (p *Process) Supervise(restartDelay time.Duration) {
	for {
		p.mu.Lock()
		done, stopped := p.done, p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		<-done
		p.mu.Lock()
		stopped = p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		time.Sleep(restartDelay)
		p.mu.Lock()
		p.restarts++
		p.mu.Unlock()
		if err := p.Start(); err != nil {
			p.Write([]byte(err.Error() + "\n")) //nolint:errcheck
			time.Sleep(restartDelay)
		}
	}
}

// Signal sends sig to the current incarnation, if it runs. SIGKILL marks
// its exit planned (a kill of the harness's).
func (p *Process) Signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGKILL:
		p.killed = true
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
}

// Stop ends supervision and the process: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	done := p.done
	p.mu.Unlock()
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		p.Signal(syscall.SIGKILL)
		<-done
	}
}

// LogText is every incarnation's output so far.
func (p *Process) LogText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// FreeAddr returns a loopback address nothing listens on now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// RunOnce runs bin to its end with env added to this process's environment
// and returns its standard output, trimmed.
func RunOnce(ctx context.Context, bin string, env map[string]string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// WaitUp waits until a GET of u gets an answer (any status), for at most
// 20 s.
func WaitUp(ctx context.Context, u string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WithApplicationName names a process's connections, so pg_stat_activity
// tells which process is connected.
func WithApplicationName(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
