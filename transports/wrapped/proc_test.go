package wrapped

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// A bridge's connection keeps net.Conn's deadlines: a read deadline that passed wakes a
// Read with os.ErrDeadlineExceeded, and once cleared the next Read goes on with the
// stream (the link hands a connection's reading between goroutines that way). Close
// ends the command.
func TestAProcKeepsNetConnDeadlines(t *testing.T) {
	testneed.Tools(t, "cat")
	p, err := runner(0)(context.Background(), []string{"cat"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	buf := make([]byte, 16)
	roundTrip := func(s string) {
		t.Helper()
		if _, err := io.WriteString(p, s); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(p, buf[:len(s)]); err != nil || string(buf[:len(s)]) != s {
			t.Fatalf("read %q, %v; want %q", buf[:len(s)], err, s)
		}
	}
	roundTrip("a\n")
	if err := p.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	if err := p.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	roundTrip("b\n")
	p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code, err := p.Exit(ctx); err != nil || code != 0 {
		t.Fatalf("after Close: exit %d, %v; want cat's 0 at its stdin's end", code, err)
	}
}
