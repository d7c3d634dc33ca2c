package daemon_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/store"
)

// TestAFullStateDiskRefusesAKeyedCellAndLosesNothing: the daemon's state directory on a
// real small tmpfs, filled to the last byte: a cell under an Idempotency-Key (which must
// be recorded before it is sent) is refused 507 no_space and not run, and so is a shell
// job (recorded before it runs, to be picked up after a restart); an unkeyed cell still
// runs; what was recorded before (the session, a keyed cell's reply) is intact, and
// once there is room again keyed cells run.
func TestAFullStateDiskRefusesAKeyedCellAndLosesNothing(t *testing.T) {
	testneed.Root(t)
	dir := shortDir(t)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testneed.Missing(t, "a tmpfs mount", errors.New(strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	state := filepath.Join(dir, "state")
	r := serve(t, daemon.Options{StateDir: state})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir()}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := r.c.RunCellOnce(ctx, s.ID, "before", api.RunCell{Code: "n = 1\nn"}); err != nil || rep.State != "settled" {
		t.Fatalf("a keyed cell with room: %+v, %v", rep, err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for n := 4096; n > 0; n /= 2 { // the last few bytes too
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	f.Close()

	// The store's file has room of its own; keyed cells with a large code grow it until
	// the disk refuses.
	pad := "# " + strings.Repeat("x", 256<<10) + "\n"
	accepted := 0
	var ae *api.Error
	for ; ; accepted++ {
		if accepted > 64 {
			t.Fatal("64 keyed cells of 256 KiB recorded on a full 8 MiB disk")
		}
		_, err = r.c.RunCellOnce(ctx, s.ID, "full"+strconv.Itoa(accepted), api.RunCell{Code: pad + "m = globals().get('m', 0) + 1"})
		if err != nil {
			break
		}
	}
	if !errors.As(err, &ae) || ae.Code != api.CodeNoSpace || ae.Status != 507 {
		t.Fatalf("a keyed cell on a full disk: %v, want 507 no_space", err)
	}
	t.Logf("%d keyed cells recorded in the store's own room, then: %v", accepted, err)
	// A shell job is recorded before it runs: once its record finds no room (commands of
	// 120 KiB fill what the store's file still has), it is refused the same way and
	// never runs.
	jobPad := ": " + strings.Repeat("y", 120<<10) + "\n"
	var marker string
	for n := 0; ; n++ {
		if n > 64 {
			t.Fatal("64 jobs of 120 KiB recorded on a full 8 MiB disk")
		}
		marker = filepath.Join(t.TempDir(), "ran")
		_, err = r.c.RunJob(ctx, s.ID, jobPad+"touch "+marker)
		if err != nil {
			break
		}
	}
	if !errors.As(err, &ae) || ae.Code != api.CodeNoSpace || ae.Status != 507 {
		t.Fatalf("a job on a full disk: %v, want 507 no_space", err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused job ran: %v", err)
	}
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "(n, globals().get('m', 0))"})
	if err != nil || rep.Cell == nil || *rep.Cell.Result != "(1, "+strconv.Itoa(accepted)+")" {
		t.Fatalf("an unkeyed cell on a full disk: %+v, %v; want it to run, and the refused cell not to have run", rep, err)
	}
	if rep, err = r.c.RunCellOnce(ctx, s.ID, "before", api.RunCell{Code: "n = 1\nn"}); err != nil || rep.Cell == nil || *rep.Cell.Result != "1" {
		t.Fatalf("the reply recorded before the disk filled: %+v, %v", rep, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if rep, err = r.c.RunCellOnce(ctx, s.ID, "room", api.RunCell{Code: "n += 1\nn"}); err != nil || rep.Cell == nil || *rep.Cell.Result != "2" {
		t.Fatalf("the keyed cell once there is room: %+v, %v", rep, err)
	}
}

// TestAnUnreadableStoreStopsTheDaemon: a state directory whose store is garbage (a torn
// write, another program's file) stops the daemon at New with an error naming the file
// and what to do; the file is left as it was.
func TestAnUnreadableStoreStopsTheDaemon(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "state.db")
	garbage := []byte(strings.Repeat("not a store ", 1000))
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := daemon.New(daemon.Options{StateDir: state, Socket: filepath.Join(shortDir(t), "s.sock")})
	if !errors.Is(err, store.ErrUnreadable) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("New on a garbage store: %v; want ErrUnreadable naming %s and the fix", err, path)
	}
	if after, _ := os.ReadFile(path); string(after) != string(garbage) {
		t.Fatal("the unreadable store was changed")
	}
}
