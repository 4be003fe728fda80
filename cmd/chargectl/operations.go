package main

import (
	"context"
	"fmt"
	"iter"

	"github.com/phasepay/phasepay/client"
)

// operation runs capture, void, refund and get-refund and prints the final
// object as the server sent it. capture, void and refund go through the
// client's journaled intents (see Run), so a run that gives up leaves its
// key for `chargectl resume`.
func (m *Main) operation(ctx context.Context, c *client.Client) error {
	var body []byte
	switch m.Command {
	case "capture":
		ch, err := c.Capture(ctx, m.ChargeID, client.CaptureParams{Amount: m.Amount})
		if err != nil {
			return err
		}
		body = ch.RawBody
	case "void":
		ch, err := c.Void(ctx, m.ChargeID)
		if err != nil {
			return err
		}
		body = ch.RawBody
	case "refund":
		r, err := c.Refund(ctx, client.RefundParams{Charge: m.ChargeID, Amount: m.Amount})
		if err != nil {
			return err
		}
		body = r.RawBody
	case "get-refund":
		r, err := c.GetRefund(ctx, m.RefundID)
		if err != nil {
			return err
		}
		body = r.RawBody
	default:
		return fmt.Errorf("unknown command %q", m.Command)
	}
	return m.print(body)
}

// list runs list-charges and list-refunds. One page is printed as the
// server sent it, and when there is more, the id to continue from goes to
// stderr; with --all every object of every page is printed on its own line
// (JSON Lines), and a count on stderr at the end.
func (m *Main) list(ctx context.Context, c *client.Client) error {
	what := "charges"
	if m.Command == "list-refunds" {
		what = "refunds of " + m.ChargeID
	}
	if m.ListAll {
		var n int
		var err error
		if m.Command == "list-refunds" {
			n, err = printAll(m, c.ListRefunds(ctx, m.ChargeID, m.List))
		} else {
			n, err = printAll(m, c.ListCharges(ctx, m.List))
		}
		fmt.Fprintf(m.Stderr, "chargectl: listed %d %s\n", n, what)
		return err
	}

	var err error
	if m.Command == "list-refunds" {
		err = printPage(m, what, func() (*client.Page[*client.Refund], error) {
			return c.ListRefundsPage(ctx, m.ChargeID, m.List)
		})
	} else {
		err = printPage(m, what, func() (*client.Page[*client.Charge], error) { return c.ListChargesPage(ctx, m.List) })
	}
	return err
}

// printPage prints the page get fetches as the server sent it, and where
// to continue when there is more.
func printPage[T rawObject](m *Main, what string, get func() (*client.Page[T], error)) error {
	p, err := get()
	if err != nil {
		return err
	}
	if err := m.print(p.RawBody); err != nil {
		return err
	}
	if p.HasMore && len(p.Data) > 0 {
		fmt.Fprintf(m.Stderr, "chargectl: more %s: --starting-after %s\n", what, objectID(p.Data[len(p.Data)-1]))
	}
	return nil
}

// rawObject is what the client's list iterators yield.
type rawObject interface {
	*client.Charge | *client.Refund
}

// printAll prints every object of seq on its own line, and returns how
// many it printed.
func printAll[T rawObject](m *Main, seq iter.Seq2[T, error]) (int, error) {
	n := 0
	for obj, err := range seq {
		if err != nil {
			return n, err
		}
		if err := m.print(rawBody(obj)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func rawBody[T rawObject](obj T) []byte {
	switch o := any(obj).(type) {
	case *client.Charge:
		return o.RawBody
	case *client.Refund:
		return o.RawBody
	}
	return nil
}

func objectID[T rawObject](obj T) string {
	switch o := any(obj).(type) {
	case *client.Charge:
		return o.ID
	case *client.Refund:
		return o.ID
	}
	return ""
}
