package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles api, reaper and mockpsp into dir with the chaos tag (which
// enables PHASEPAY_CHAOS_CRASH and PHASEPAY_CHAOS_DEFECT, package
// harness/faults). moduleDir is the repository root.
func Build(ctx context.Context, moduleDir, dir string) error {
	const tags = "chaos"
	for _, name := range []string{"api", "reaper", "mockpsp"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = moduleDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s (tags %s): %w\n%s", name, tags, err, out)
		}
	}
	return nil
}

// process is one supervised binary: restarted after it dies until stop.
//
// Every exit is either planned — the harness killed it (signal SIGKILL, or
// stop), or it crashed itself at a chaos crash point, which it logs first —
// or unplanned: it exited by itself, e.g. because the database went away.
// Unplanned exits are violations; the supervisor still restarts the
// process so the run can go on and show everything else it finds.
type process struct {
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

func newProcess(name, bin string, env map[string]string, args ...string) *process {
	p := &process{name: name, bin: bin, args: args, env: os.Environ()}
	for k, v := range env {
		p.env = append(p.env, k+"="+v)
	}
	return p
}

// Write collects stderr; it is called by exec's copying goroutine.
func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *process) start() error {
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
func (p *process) judgeExit(st *os.ProcessState) {
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
		p.name, st.Pid(), time.Now().UTC().Format("15:04:05.000"), st, lastLines(out, 3)))
}

// doneChan is closed when the current incarnation has exited.
func (p *process) doneChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// unplannedExits returns the unplanned exits so far.
func (p *process) unplannedExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.unplanned...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// supervise restarts the process whenever it exits, until stop.
func (p *process) supervise(restartDelay time.Duration) {
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
		if err := p.start(); err != nil {
			p.Write([]byte(err.Error() + "\n")) //nolint:errcheck
			time.Sleep(restartDelay)
		}
	}
}

func (p *process) signal(sig syscall.Signal) {
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

// stop ends supervision and the process: SIGTERM, then SIGKILL.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	done := p.done
	p.mu.Unlock()
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-done
	}
}

func (p *process) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func runOnce(ctx context.Context, bin string, env map[string]string, args ...string) (string, error) {
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
