package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/store"
	"github.com/kennel-dev/kennel/transports"
)

func open(t testing.TB, path string) *store.Store {
	t.Helper()
	s, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPropTheStoreKeepsWhatWasPutAcrossReopens: any sequence of puts, updates and deletes,
// with the file closed and reopened at generated points, reads back as a map would.
func TestPropTheStoreKeepsWhatWasPutAcrossReopens(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("s%d.db", rapid.Int().Draw(rt, "n")))
		s := open(t, path)
		defer func() { s.Close() }()
		model := map[string]store.Session{}
		ids := rapid.SampledFrom([]string{"a", "b", "c", "d"})
		for range rapid.IntRange(0, 30).Draw(rt, "ops") {
			id := ids.Draw(rt, "id")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				sess := store.Session{ID: id, Cwd: rapid.String().Draw(rt, "cwd"), Epoch: rapid.Uint64().Draw(rt, "epoch"), Request: []byte(`{}`), Spec: []byte(`null`)}
				if rapid.Bool().Draw(rt, "kernel") {
					sess.Kernel = &transports.Record{Transport: "local", Kernel: "k" + id, Token: "t", PID: 7, Applied: rapid.Uint64().Draw(rt, "applied")}
				}
				if err := s.Put(sess); err != nil {
					rt.Fatal(err)
				}
				model[id] = sess
			case 1:
				err := s.Update(id, func(sess *store.Session) error { sess.Epoch++; return nil })
				if m, ok := model[id]; ok {
					if err != nil {
						rt.Fatal(err)
					}
					m.Epoch++
					model[id] = m
				} else if !errors.Is(err, store.ErrNoSession) {
					rt.Fatalf("update of a session not stored: %v", err)
				}
			case 2:
				if err := s.Delete(id); err != nil {
					rt.Fatal(err)
				}
				delete(model, id)
			case 3:
				s.Close()
				s = open(t, path)
			}
		}
		got, err := s.Sessions()
		if err != nil {
			rt.Fatal(err)
		}
		var want []store.Session
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range model {
				if !yield(k) {
					return
				}
			}
		}) {
			want = append(want, model[k])
		}
		if len(got) != len(want) {
			rt.Fatalf("stored %d sessions, want %d", len(got), len(want))
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.ID != w.ID || g.Cwd != w.Cwd || g.Epoch != w.Epoch || (g.Kernel == nil) != (w.Kernel == nil) || (g.Kernel != nil && *g.Kernel != *w.Kernel) {
				rt.Fatalf("session %d: %+v, want %+v", i, g, w)
			}
		}
	})
}

// TestAnUnreadableStoreIsRefusedAndKept: garbage, a torn (truncated) store and a store of
// another layout version each refuse to open with ErrUnreadable naming the file, and
// the file is left byte for byte as it was.
func TestAnUnreadableStoreIsRefusedAndKept(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	s := open(t, good)
	for i := range 50 {
		if err := s.Put(store.Session{ID: fmt.Sprintf("s%03d", i), Cwd: string(bytes.Repeat([]byte("x"), 2000)), Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	db, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("version"), []byte("99"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	otherBytes, _ := os.ReadFile(other)
	for name, content := range map[string][]byte{
		"garbage": bytes.Repeat([]byte("not a database "), 4096),
		"torn":    whole[:len(whole)/3],
		"zeroed":  append(make([]byte, 8192), whole[8192:]...),
		"other":   otherBytes,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := store.Open(path)
			if err == nil {
				_, err = s.Sessions() // a torn file may open: its pages must not read back
				s.Close()
			}
			if !errors.Is(err, store.ErrUnreadable) || !bytes.Contains([]byte(err.Error()), []byte(path)) {
				t.Fatalf("open %s: %v, want ErrUnreadable naming the file", name, err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, content) {
				t.Fatalf("the %s file was changed by the refused open", name)
			}
		})
	}
}

// TestTheStoreIsPrivateAndHeldByOne: the file is made 0600; a second open while one holds
// it is ErrLocked; a file others may read is refused.
func TestTheStoreIsPrivateAndHeldByOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := store.Open(path); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("a second open: %v, want ErrLocked", err)
	}
	s.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(path); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("open of a 0644 store: %v, want permission denied", err)
	}
}

// TestCellRecordsAreKeptBoundedAndGoWithTheirSession: a session's cell records read back
// by key and in order; past MaxCells the oldest goes; deleting the session deletes them.
func TestCellRecordsAreKeptBoundedAndGoWithTheirSession(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	if err := s.Put(store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	for i := range store.MaxCells + 3 {
		if err := s.PutCell("s1", store.Cell{Key: fmt.Sprintf("k%d", i), Cell: fmt.Sprintf("c%d", i), State: store.CellRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutCell("s1", store.Cell{Key: "k5", Cell: "c5", State: store.CellSettled, Reply: []byte(`{"state":"settled"}`)}); err != nil {
		t.Fatal(err)
	}
	cells, err := s.Cells("s1")
	if err != nil || len(cells) != store.MaxCells || cells[0].Key != "k3" || cells[2].Key != "k5" || cells[2].State != store.CellSettled {
		t.Fatalf("%d records (first %+v), %v; want %d from k3, k5 settled in its place", len(cells), cells[0], err, store.MaxCells)
	}
	if _, ok, _ := s.CellOf("s1", "k0"); ok {
		t.Fatal("the oldest record was kept past the bound")
	}
	if err := s.PutCell("s1", store.Cell{}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("a record without a key: %v", err)
	}
	if err := s.Delete("s1"); err != nil {
		t.Fatal(err)
	}
	if cells, _ := s.Cells("s1"); len(cells) != 0 {
		t.Fatalf("%d cell records outlived their session", len(cells))
	}
}

// TestJobRecordsAreBoundedByTheirEndedAndGoWithTheirSession: past MaxJobs the oldest
// ended record goes (and is returned, for its kept file); running ones are never dropped;
// a session not stored keeps no job records.
func TestJobRecordsAreBoundedByTheirEndedAndGoWithTheirSession(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	if _, err := s.PutJob("nope", store.Job{ID: "j1"}); !errors.Is(err, store.ErrNoSession) {
		t.Fatalf("a job of a session not stored: %v", err)
	}
	if err := s.Put(store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutJob("s1", store.Job{ID: "j0", State: store.JobRunning}); err != nil {
		t.Fatal(err)
	}
	var dropped []string
	for i := 1; i <= store.MaxJobs+2; i++ {
		d, err := s.PutJob("s1", store.Job{ID: fmt.Sprintf("j%d", i), State: store.JobEnded, Kept: fmt.Sprintf("/k/%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if d != nil {
			dropped = append(dropped, d.ID)
		}
	}
	js, err := s.Jobs("s1")
	if err != nil || len(js) != store.MaxJobs || js[0].ID != "j0" || !slices.Equal(dropped, []string{"j1", "j2", "j3"}) {
		t.Fatalf("%d records from %s, dropped %v, %v: want %d with the running j0 kept and j1-j3 dropped", len(js), js[0].ID, dropped, err, store.MaxJobs)
	}
	if err := s.Delete("s1"); err != nil {
		t.Fatal(err)
	}
	if js, _ := s.Jobs("s1"); len(js) != 0 {
		t.Fatalf("%d job records outlived their session", len(js))
	}
}
