// Package envconfig reads the contract's environment variables with their
// defaults, reporting a bad value as a one-line error that names it.
package envconfig

import (
	"fmt"
	"strconv"
	"time"
)

// Getenv is os.Getenv, or a map lookup in tests.
type Getenv func(string) string

// String returns the variable's value, or def if unset or empty.
func String(getenv Getenv, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// Duration parses a Go duration ("60s"), or returns def if unset. It must
// be positive.
func Duration(getenv Getenv, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (e.g. 60s, 1m30s)", name, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s: must be positive, got %s", name, v)
	}
	return d, nil
}

// Bool parses true/false/1/0, or returns def if unset.
func Bool(getenv Getenv, name string, def bool) (bool, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not a boolean", name, v)
	}
	return b, nil
}

// Int parses a whole number between lo and hi, or returns def if unset.
func Int(getenv Getenv, name string, def, lo, hi int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s: %q is not a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}
