package main

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
)

// ListenAddrDefault is the listen address when MOCKPSP_ADDR is unset.
const ListenAddrDefault = mockpsp.AddrDefault

// ParseEnv reads the configuration from getenv (os.Getenv in main). Unset or
// empty variables keep the current values. The error names the variable and
// fits on one line.
func (m *Main) ParseEnv(getenv func(string) string) error {
	if v := strings.TrimSpace(getenv("MOCKPSP_ADDR")); v != "" {
		// Checked here so that a typo is a one-line configuration error
		// rather than a failure to listen.
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("MOCKPSP_ADDR: %q is not host:port", v)
		}
		m.ListenAddr = v
	}
	if v := strings.TrimSpace(getenv("MOCKPSP_NAME")); v != "" {
		m.Name = v
	}
	if v := strings.TrimSpace(getenv("MOCKPSP_KEY_TTL")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("MOCKPSP_KEY_TTL: %q is not a duration (24h, 30s)", v)
		}
		if d <= 0 {
			return fmt.Errorf("MOCKPSP_KEY_TTL: %q: must be positive", v)
		}
		m.KeyTTL = d
	}
	for _, rate := range []struct {
		name string
		dst  *float64
	}{
		{"MOCKPSP_ERROR_RATE", &m.Faults.ErrorRate},
		{"MOCKPSP_DROP_RATE", &m.Faults.DropRate},
		{"MOCKPSP_REJECT_RATE", &m.Faults.RejectRate},
		{"MOCKPSP_LOOKUP_ERROR_RATE", &m.Faults.LookupErrorRate},
	} {
		v := strings.TrimSpace(getenv(rate.name))
		if v == "" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a number", rate.name, v)
		}
		// Written as !(in range) so that NaN fails too.
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("%s: must be between 0 and 1", rate.name)
		}
		*rate.dst = f
	}
	if v := strings.TrimSpace(getenv("MOCKPSP_STATE")); v != "" {
		m.StateFile = v
	}
	if v := strings.TrimSpace(getenv("MOCKPSP_LATENCY")); v != "" {
		ms, err := parseLatency(v)
		if err != nil {
			return fmt.Errorf("MOCKPSP_LATENCY: %w", err)
		}
		m.Faults.LatencyMS = ms
	}
	return nil
}

// parseLatency accepts a Go duration ("50ms", "1s") or a bare integer of
// milliseconds ("50"), the unit of latency_ms.
func parseLatency(v string) (int, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("%q is neither a duration (50ms) nor a number of milliseconds", v)
		}
		if n > int(time.Duration(math.MaxInt64)/time.Millisecond) {
			return 0, fmt.Errorf("%q: too long", v)
		}
		d = time.Duration(n) * time.Millisecond
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: must not be negative", v)
	}
	if d%time.Millisecond != 0 {
		// The mock delays in whole milliseconds; rounding silently would
		// turn "500us" into no latency at all.
		return 0, fmt.Errorf("%q: must be a whole number of milliseconds", v)
	}
	return int(d / time.Millisecond), nil
}
