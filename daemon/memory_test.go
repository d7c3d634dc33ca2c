package daemon_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
)

func TestASessionsKernelMemoryCapInterruptsACellWithReasonMemory(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Limits: &api.Limits{KernelMemoryBytes: 64 << 20}}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grow := "import time\nbig = []\nfor _ in range(100000):\n    big.append(b'x' * (1 << 20))\n    time.sleep(0.005)\n"
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: grow})
	if err != nil || rep.Cell == nil || rep.Cell.Status != "interrupted" || rep.Cell.Reason != "memory" || !strings.Contains(rep.Cell.Note, "64.0 MiB") {
		t.Fatalf("growing cell: %+v %v", rep, err)
	}
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "len(big) > 10"})
	if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "True" {
		t.Fatalf("the namespace after the interrupt: %+v %v", rep, err)
	}
	_, err = r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Limits: &api.Limits{KernelMemoryBytes: -2}}, client.CreateOptions{})
	if apiCode(t, err) != api.CodeInvalid {
		t.Fatalf("a cap of -2: %v", err)
	}
}
