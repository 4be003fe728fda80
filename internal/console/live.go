package console

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Live updates: a page's URL asked for as text/event-stream (what
// EventSource asks for) streams the page's "live" template, re-rendered
// every Refresh and sent when it changed, until the browser goes away.
// Rendering stays on the server, in html/template, so a live update is
// escaped exactly as the page was.

// maxStream bounds one stream; the browser's EventSource reconnects by
// itself, which also picks up a new session or a restarted console.
const maxStream = 10 * time.Minute

func wantsEvents(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, h pageFunc) {
	rc := http.NewResponseController(w)
	// The server's write timeout is for pages; a stream lives longer.
	_ = rc.SetWriteDeadline(time.Now().Add(maxStream + time.Minute))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	var last []byte
	end := time.After(maxStream)
	tick := time.NewTicker(s.cfg.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-end:
			return
		case <-tick.C:
		}
		// A session ended by a logout (in another tab, or at another
		// console) ends its streams: they would go on showing every
		// tenant's requests.
		if c := session(r); c != "" {
			if ok, err := s.auth.sessionValid(r.Context(), c); err == nil && !ok {
				return
			}
		}
		var b bytes.Buffer
		v, err := s.build(r, h)
		if err == nil {
			if t, ok := s.pages[v.template]; ok {
				v.page.CSRF = s.auth.csrfToken(r)
				v.page.Now = time.Now()
				err = t.ExecuteTemplate(&b, "live", v.page)
			}
		}
		if err != nil {
			// A database away for a moment: say so in a comment line
			// (ignored by EventSource) and keep the last state shown.
			if _, werr := fmt.Fprintf(w, ": %s\n\n", oneLine(err.Error())); werr != nil {
				return
			}
			_ = rc.Flush()
			continue
		}
		if bytes.Equal(b.Bytes(), last) {
			continue
		}
		last = b.Bytes()
		if _, err := w.Write(eventOf(b.String())); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// eventOf is a server-sent event carrying data: one "data:" line per line
// of it, its lines split where the browser's EventSource splits them, at
// CR, LF and CRLF alike. Split at LF alone, a CR inside a page (a stored
// answer may hold one) would end the line early for the browser, and what
// follows it would be read as a field of the event: "event: x" renames the
// event so that no handler sees it, "retry:" and "id:" change the stream.
// See pitfall O13 "A live update split where the browser does not split".
func eventOf(data string) []byte {
	data = strings.ReplaceAll(data, "\r\n", "\n")
	data = strings.ReplaceAll(data, "\r", "\n")
	var ev bytes.Buffer
	for line := range strings.SplitSeq(data, "\n") {
		ev.WriteString("data: ")
		ev.WriteString(line)
		ev.WriteByte('\n')
	}
	ev.WriteByte('\n')
	return ev.Bytes()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
