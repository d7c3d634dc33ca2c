package kernelstart

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// A cut reader returns what the pipe already holds, then EOF, although a writer still
// holds the pipe; a reader blocked in Read wakes up.
func TestCutReadsWhatIsLeftThenEOF(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr := NewPipeReader(r)
	if _, err := w.WriteString("first"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := pr.Read(buf); err != nil || string(buf[:n]) != "first" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	// A Read that blocks, then a cut.
	got := make(chan error, 1)
	go func() {
		n, err := pr.Read(buf)
		if err == nil && n > 0 {
			err = errors.New("read " + string(buf[:n]))
		}
		got <- err
	}()
	time.Sleep(20 * time.Millisecond)
	pr.Cut()
	if err := <-got; !errors.Is(err, io.EOF) {
		t.Fatalf("blocked read after the cut: %v, want EOF", err)
	}
	if _, err := pr.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after EOF: %v", err)
	}
}

func TestCutKeepsBytesAlreadyInThePipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pr := NewPipeReader(r)
	want := make([]byte, 40000)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	if _, err := w.Write(want); err != nil {
		t.Fatal(err)
	}
	pr.Cut()
	b, err := io.ReadAll(pr)
	if err != nil || string(b) != string(want) {
		t.Fatalf("read %d bytes, %v; want the %d written", len(b), err, len(want))
	}
	if _, err := r.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("pipe not released at EOF: %v", err)
	}
}

func TestUncutReaderEndsAtEOF(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr := NewPipeReader(r)
	_, _ = w.WriteString("abc")
	w.Close()
	b, err := io.ReadAll(pr)
	if err != nil || string(b) != "abc" {
		t.Fatalf("read %q, %v", b, err)
	}
	pr.Cut() // after the end: harmless
	if _, err := pr.Read(make([]byte, 4)); err != io.EOF {
		t.Fatalf("after EOF: %v", err)
	}
}
