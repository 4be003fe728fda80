package main

import (
	"fmt"
	"net/url"
	"time"

	"github.com/phasepay/phasepay/internal/envconfig"
	"github.com/phasepay/phasepay/internal/platform"
	"github.com/phasepay/phasepay/internal/psp"
)

// Config is the API's configuration, from the contract's environment
// variables.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (DATABASE_URL).
	DatabaseURL string
	// Addr is the listen address (API_ADDR); port 0 picks a free one.
	Addr string
	// PSPURL is the PSP's base URL (PSP_URL). Empty: an in-process mock PSP
	// listening on MockPSPAddr (MOCKPSP_ADDR), so that a reaper started with
	// PSP_URL=http://MOCKPSP_ADDR shares its ledger.
	PSPURL      string
	MockPSPAddr string
	// Lease is how long a worker holds a key without progress (LEASE).
	Lease time.Duration
	// PprofAddr, if set (PPROF_ADDR), serves net/http/pprof there: for
	// profiling under `make bench`, never on a public address.
	PprofAddr string
	// OneCommitPerPhase commits every recovery point separately
	// (ONE_COMMIT_PER_PHASE=true), for comparison; the default folds the
	// arrows that have no foreign call between them.
	OneCommitPerPhase bool
}

// Defaults of the contract.
const (
	DatabaseURLDefault = platform.DatabaseURLDefault
	AddrDefault        = "127.0.0.1:8080"
	MockPSPAddrDefault = psp.MockAddrDefault
	LeaseDefault       = 60 * time.Second
)

// ParseEnv reads Config from the environment and validates it.
func ParseEnv(getenv func(string) string) (Config, error) {
	var (
		c   Config
		err error
	)
	c.DatabaseURL = envconfig.String(getenv, "DATABASE_URL", DatabaseURLDefault)
	c.Addr = envconfig.String(getenv, "API_ADDR", AddrDefault)
	c.PSPURL = getenv("PSP_URL")
	c.MockPSPAddr = envconfig.String(getenv, "MOCKPSP_ADDR", MockPSPAddrDefault)
	c.PprofAddr = getenv("PPROF_ADDR")
	if c.Lease, err = envconfig.Duration(getenv, "LEASE", LeaseDefault); err != nil {
		return Config{}, err
	}
	if c.Lease < time.Second {
		return Config{}, fmt.Errorf("LEASE: must be at least 1s, got %s", c.Lease)
	}
	if c.OneCommitPerPhase, err = envconfig.Bool(getenv, "ONE_COMMIT_PER_PHASE", false); err != nil {
		return Config{}, err
	}
	if c.PSPURL != "" {
		if u, err := url.Parse(c.PSPURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Config{}, fmt.Errorf("PSP_URL: %q is not an http(s) URL", c.PSPURL)
		}
	}
	return c, nil
}
