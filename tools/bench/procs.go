package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/phasepay/phasepay/tools/procs"
)

// server is a bin/api or bin/mockpsp the benchmark runs.
type server struct {
	cmd      *exec.Cmd
	done     chan error
	stopOnce sync.Once
}

func startServer(ctx context.Context, bin string, env map[string]string, health string, args ...string) (*server, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = nil // the JSON request log of a benchmark is noise
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, health, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%s did not come up at %s", bin, health)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the server with SIGTERM and waits: its connections close, so
// its backends flush their statistics.
// It is safe to call more than once.
func (s *server) stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// startStack starts the mock PSP (no faults, no latency) and one API.
func (e *env) startStack(ctx context.Context, extra map[string]string) (base string, stop func(), err error) {
	return e.startStackOn(ctx, e.dbURL, extra)
}

// startPSP starts a mock PSP process and returns its base URL.
func (e *env) startPSP(ctx context.Context) (string, *server, error) {
	pspAddr, err := procs.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	psp, err := startServer(ctx, filepath.Join(e.cfg.BinDir, "mockpsp"), map[string]string{"MOCKPSP_ADDR": pspAddr},
		"http://"+pspAddr+"/_admin/authorizations")
	if err != nil {
		return "", nil, err
	}
	return "http://" + pspAddr, psp, nil
}

// startStackOn is startStack with the API connecting to dbURL (the
// round-trip counter's proxy, say).
func (e *env) startStackOn(ctx context.Context, dbURL string, extra map[string]string) (base string, stop func(), err error) {
	base, _, stop, err = e.startStackProc(ctx, dbURL, extra)
	return base, stop, err
}

// startStackProc is startStackOn that also returns the api's process.
func (e *env) startStackProc(ctx context.Context, dbURL string, extra map[string]string) (base string, api *server, stop func(), err error) {
	pspURL, psp, err := e.startPSP(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	apiAddr, err := procs.FreeAddr()
	if err != nil {
		psp.stop()
		return "", nil, nil, err
	}
	envs := map[string]string{"DATABASE_URL": dbURL, "API_ADDR": apiAddr, "PSP_URL": pspURL}
	for k, v := range extra {
		envs[k] = v
	}
	api, err = startServer(ctx, filepath.Join(e.cfg.BinDir, "api"), envs, "http://"+apiAddr+"/healthz", "serve")
	if err != nil {
		psp.stop()
		return "", nil, nil, err
	}
	return "http://" + apiAddr, api, func() { api.stop(); psp.stop() }, nil
}
