package controller_test

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/jobs"
)

// benchBytes is what each benchmark moves per iteration.
const benchBytes = 256 << 20

// BenchmarkJobOutput measures job output from the kernel to the controller: a shell job
// `head -c 256M /dev/zero` in a local kernel, its bytes written into the FIFOs the
// controller reads (a local kernel shares the host's file system) and into the job's
// capture, until the job's end. The session is started once, outside the timing.
func BenchmarkJobOutput(b *testing.B) {
	s := startBenchSession(b)
	ctx := context.Background()
	b.SetBytes(benchBytes)
	for b.Loop() {
		j, err := s.RunJob(ctx, "head -c 256M /dev/zero", controller.JobOptions{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := s.WaitJob(ctx, j.ID(), time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		st, ok := w.Outcome.(jobs.Settled)
		if !ok || st.End.ExitCode == nil || *st.End.ExitCode != 0 || st.Output.TotalBytes != benchBytes {
			b.Fatalf("job did not settle with exit 0 and all its bytes: %#v", w)
		}
	}
}

// BenchmarkCatPipe is BenchmarkJobOutput's baseline, measured the same way: the same
// bytes from the same producer through a relay process (cat) and a pipe into this
// process, read to the end and counted: `head -c 256M /dev/zero | cat`.
func BenchmarkCatPipe(b *testing.B) {
	b.SetBytes(benchBytes)
	buf := make([]byte, 64<<10)
	for b.Loop() {
		cmd := exec.Command("sh", "-c", "head -c 256M /dev/zero | cat")
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, out, buf)
		if err != nil || n != benchBytes {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

func startBenchSession(b *testing.B) *controller.Session {
	b.Helper()
	bundle, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Options{
		Transport: sharedTransport(),
		Dir:       b.TempDir(),
		StateDir:  filepath.Join(b.TempDir(), "state"),
		Bundle:    bundle.Hash(),
	})
	if err != nil {
		b.Fatalf("start session: %v", err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}
