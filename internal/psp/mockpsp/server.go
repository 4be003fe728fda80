package mockpsp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// AddrDefault is the contract's default MOCKPSP_ADDR: where bin/mockpsp,
// and the API's embedded mock, listen.
const AddrDefault = "127.0.0.1:8090"

// Server is a Mock served over HTTP on a loopback listener: the
// in-process PSP that bin/api and bin/reaper use when PSP_URL is empty.
type Server struct {
	Mock *Mock
	// URL is the base URL to give a Client.
	URL string
	srv *http.Server
}

// Start serves a new fault-free Mock on addr, or on a free loopback
// port if addr is taken (another process already serves its own mock there).
// The returned bool reports whether addr itself was used.
func Start(addr string) (*Server, bool, error) {
	mock, err := New(Faults{})
	if err != nil {
		return nil, false, err
	}
	onAddr := true
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		onAddr = false
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, false, fmt.Errorf("mock psp: %w", err)
		}
	}
	s := &Server{
		Mock: mock,
		URL:  "http://" + ln.Addr().String(),
		srv:  &http.Server{Handler: mock, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(fmt.Sprintf("mock psp: %v", err)) // a loopback listener we own does not fail
		}
	}()
	return s, onAddr, nil
}

// Shutdown stops the server, waiting for requests in flight.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
