package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// binDir holds the binaries built once by TestMain, exactly as make build
// builds them: these tests run the real processes and kill them.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "phasepay-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, name := range []string{"api", "reaper", "mockpsp"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "../cmd/"+name)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n", name, err)
				return 1
			}
		}
		binDir = dir
		return m.Run()
	}())
}

// proc is a running binary whose stderr is kept for the test's log.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	out  *syncBuffer // stderr, and stdout unless split
	// stdout is the process's standard output alone (console spans).
	stdout *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, name string, env map[string]string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &proc{t: t, name: name, cmd: cmd, out: &syncBuffer{}, stdout: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.out
	cmd.Stdout = p.stdout
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("--- %s output:\n%s%s", name, p.out.String(), p.stdout.String())
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		require.NoError(p.t, p.err, "%s did not exit cleanly:\n%s", p.name, p.out.String())
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not stop on SIGTERM", p.name)
	}
}

func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 15*time.Second, 20*time.Millisecond, "%s never became healthy", base)
}

// runCmd runs a binary to completion and returns its stdout.
func runCmd(t *testing.T, name string, env map[string]string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name), args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	return strings.TrimSpace(stdout.String())
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func post(ctx context.Context, base, apiKey, idemKey, body string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/charges", strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", idemKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

type ledgerEntry struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Reference      string `json:"reference"`
	Status         string `json:"status"`
	Attempts       int    `json:"attempts"`
}

func ledger(t *testing.T, pspURL string) []ledgerEntry {
	t.Helper()
	resp, err := http.Get(pspURL + "/_admin/authorizations")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Data []ledgerEntry }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Data
}
