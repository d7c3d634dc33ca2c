package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
)

// restartKernels is how many live kernels the restart benchmark holds.
const restartKernels = 100

// BenchmarkRestart100Kernels: a daemon restart with 100 live local kernels, until every
// session's kernel is reattached (its state running again, each the same process), beside
// starting 100 fresh kernels through the API (8 creates at a time, as the restore reattaches).
//
//	go test -run XXX -bench Restart100Kernels -benchtime 5x ./daemon/
func BenchmarkRestart100Kernels(b *testing.B) {
	b.Run("fresh", func(b *testing.B) {
		b.StopTimer()
		for range b.N {
			r := serve(b, daemon.Options{})
			b.StartTimer()
			createMany(b, r.c, restartKernels)
			b.StopTimer()
			r.stop()
		}
	})
	b.Run("resume", func(b *testing.B) {
		dir, err := os.MkdirTemp("", "kd")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(dir) // ends the kernels (their run directories go)
		state := filepath.Join(dir, "state")
		r := serveDetaching(b, daemon.Options{StateDir: state})
		createMany(b, r.c, restartKernels)
		r.stop()
		b.ResetTimer()
		b.StopTimer()
		for range b.N {
			b.StartTimer()
			r = serveDetaching(b, daemon.Options{StateDir: state})
			for {
				list, err := r.c.Sessions(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				running := 0
				for _, s := range list {
					if s.Kernel.State != nil && *s.Kernel.State == "running" && s.Kernel.Origin != nil && *s.Kernel.Origin == "resumed" {
						running++
					}
				}
				if len(list) != restartKernels {
					b.Fatalf("%d sessions after the restart, want %d", len(list), restartKernels)
				}
				if running == restartKernels {
					break
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			r.stop()
		}
	})
}

// createMany creates n local sessions, 8 at a time, each with its kernel started.
func createMany(b *testing.B, c *client.Client, n int) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := c.CreateSession(context.Background(), api.CreateSession{Cwd: os.TempDir()}, client.CreateOptions{}); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}
