package reaper

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// BenchmarkReaperTrue is the cost the reaper adds to a kernel's start and end: /bin/true
// run under a reaper (the test binary re-executed), from Start until Wait returns. Its
// baseline is BenchmarkExecTrue.
func BenchmarkReaperTrue(b *testing.B) {
	truePath := testneed.Tool(b, "true")
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() }()
	env := os.Environ()
	for b.Loop() {
		p, err := Start(context.Background(), Spec{Argv: []string{truePath}, Env: env, Stdin: inR, Stdout: outW})
		if err != nil {
			b.Fatal(err)
		}
		if st, err := p.Wait(); err != nil || st != (Status{}) {
			b.Fatal(st, err)
		}
	}
}

// BenchmarkExecTrue is the baseline of BenchmarkReaperTrue: /bin/true started by os/exec.
func BenchmarkExecTrue(b *testing.B) {
	truePath := testneed.Tool(b, "true")
	for b.Loop() {
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
	}
}
