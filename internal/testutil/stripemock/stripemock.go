// Package stripemock runs stripe-mock, Stripe's official mock of its API
// (github.com/stripe/stripe-mock, pinned by scripts/install-stripe-mock), as
// a throw-away process on free ports of 127.0.0.1. It validates every
// request against Stripe's OpenAPI specification and answers from
// fixtures; it keeps no state. The Stripe connector's tests send every call
// the connector makes through it, and the end-to-end test runs a stack on
// it (PSPS=stripe=stripe+http://127.0.0.1:PORT).
//
// The binary is $STRIPE_MOCK, else stripe-mock in $(go env GOPATH)/bin or on
// PATH. When none is found, scripts/install-stripe-mock installs it, as
// `make test` does first; a test never skips for want of one.
package stripemock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the stripe-mock this package runs.
const Version = "v0.203.0"

// Options configure a stripe-mock.
type Options struct {
	// Authorizing gives stripe-mock a fixture PaymentIntent whose status is
	// requires_capture (what Stripe answers to a PaymentIntent confirmed
	// with manual capture on a card that authorizes), instead of its
	// bundled requires_payment_method: its answers then authorize, as the
	// end-to-end test needs. Every other fixture is stripe-mock's own.
	Authorizing bool
}

// Mock is one running stripe-mock.
type Mock struct {
	// URL is its HTTP address, http://127.0.0.1:PORT.
	URL string
	cmd *exec.Cmd
	out *bytes.Buffer
}

// ForTest starts a stripe-mock and stops it when t ends.
func ForTest(t testing.TB, opts Options) *Mock {
	t.Helper()
	m, err := Start(opts, t.TempDir())
	if err != nil {
		t.Fatalf("stripe-mock: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}

var listenRE = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// Start starts a stripe-mock, its patched fixtures (Authorizing) written
// in dir.
func Start(opts Options, dir string) (*Mock, error) {
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	// Both listeners on free ports of the loopback: stripe-mock's HTTPS
	// one would otherwise take the fixed port 12112.
	args := []string{"-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:"}
	if opts.Authorizing {
		path, err := authorizingFixtures(dir)
		if err != nil {
			return nil, err
		}
		args = append(args, "-fixtures", path)
	}
	cmd := exec.Command(bin, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	m := &Mock{cmd: cmd, out: &bytes.Buffer{}}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			m.out.WriteString(line + "\n")
			if mm := listenRE.FindStringSubmatch(line); mm != nil {
				select {
				case found <- mm[1]:
				default:
				}
			}
		}
	}()
	go func() { _ = cmd.Wait(); pw.Close() }()
	select {
	case addr := <-found:
		m.URL = "http://" + addr
		return m, nil
	case <-time.After(30 * time.Second):
		m.Close()
		return nil, fmt.Errorf("stripe-mock did not listen within 30s: %s", m.out.String())
	}
}

// Close stops the mock.
func (m *Mock) Close() {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
	}
}

// authorizingFixtures writes stripe-mock's bundled fixtures (from its module
// source, which go install leaves in the module cache) with the
// PaymentIntent's status requires_capture, and returns the file's path.
func authorizingFixtures(dir string) (string, error) {
	src, err := moduleDir()
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(filepath.Join(src, "embedded", "openapi", "fixtures3.json"))
	if err != nil {
		return "", fmt.Errorf("stripe-mock's fixtures: %w (run scripts/install-stripe-mock)", err)
	}
	var fx struct {
		Resources map[string]map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		return "", fmt.Errorf("stripe-mock's fixtures: %w", err)
	}
	pi := fx.Resources["payment_intent"]
	if pi == nil {
		return "", errors.New("stripe-mock's fixtures have no payment_intent")
	}
	pi["status"], pi["amount_capturable"], pi["last_payment_error"], pi["next_action"] = "requires_capture", pi["amount"], nil, nil
	out, err := json.Marshal(fx)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "fixtures-authorizing.json")
	return path, os.WriteFile(path, out, 0o600)
}

var installOnce = sync.OnceValue(func() error {
	script, err := findScript()
	if err != nil {
		return err
	}
	if out, err := exec.Command(script).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", script, err, strings.TrimSpace(string(out)))
	}
	return nil
})

// binary finds stripe-mock, installing it when it is missing.
func binary() (string, error) {
	if b := os.Getenv("STRIPE_MOCK"); b != "" {
		return b, nil
	}
	if err := installOnce(); err != nil {
		return "", err
	}
	gopath, err := goEnv("GOPATH")
	if err != nil {
		return "", err
	}
	if b := filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", "stripe-mock"); isExecutable(b) {
		return b, nil
	}
	return exec.LookPath("stripe-mock")
}

// moduleDir is stripe-mock's module source in the module cache.
func moduleDir() (string, error) {
	if err := installOnce(); err != nil && os.Getenv("STRIPE_MOCK") == "" {
		return "", err
	}
	cache, err := goEnv("GOMODCACHE")
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "github.com", "stripe", "stripe-mock@"+Version), nil
}

func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// findScript finds scripts/install-stripe-mock above the working directory.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "install-stripe-mock")
		if isExecutable(p) {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/install-stripe-mock is not found above the working directory: run it, or set STRIPE_MOCK")
		}
		dir = parent
	}
}
