package profile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The api's CPU profile comes from its net/http/pprof listener
// (PPROF_ADDR, off unless set), taken while the charges run, and is read
// with `go tool pprof -top -cum`.

// Func is one function of the api's CPU profile.
type Func struct {
	Name string `json:"name"`
	// Cum is the share of the profile's samples in which the function is
	// on the stack (itself or what it calls), in percent.
	Cum float64 `json:"cum_pct"`
	// Flat is the share spent in the function itself, in percent.
	Flat float64 `json:"flat_pct"`
}

// fetchProfile saves a CPU profile of seconds from the pprof listener at
// addr into path.
func fetchProfile(ctx context.Context, addr string, seconds int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, seconds), nil)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: time.Duration(seconds+30) * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("pprof: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// topFuncs reads the n functions of the profile at path with the largest
// cumulative share (cum), or the largest share of their own (flat).
func topFuncs(ctx context.Context, bin, path string, n int, cum bool) ([]Func, error) {
	args := []string{"tool", "pprof", "-top", "-nodecount", strconv.Itoa(n)}
	if cum {
		args = append(args, "-cum")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, bin, path)...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w", err)
	}
	return parseTop(strings.NewReader(string(out))), nil
}

// parseTop reads `go tool pprof -top` lines:
//
//	flat  flat%   sum%        cum   cum%
//	0.01s  0.12% 45.20%      2.50s 31.25%  net/http.(*conn).serve
//
// and skips every other line (the header, the summary).
func parseTop(r io.Reader) []Func {
	var funcs []Func
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		funcs = append(funcs, Func{Name: strings.Join(f[5:], " "), Cum: cum, Flat: flat})
	}
	return funcs
}
