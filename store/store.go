// Package store is the daemon's durable state: its sessions and the records of their
// detached kernels, kept in one crash-safe file so that a restarted `kennel serve` (after
// an upgrade, a crash or a SIGKILL) finds every session and reattaches its kernel.
//
// The file is a bbolt database (go.etcd.io/bbolt, what containerd and etcd keep their
// metadata in): every Put is one transaction, fsynced before it returns, so a record is
// either wholly there after a crash or not at all. The file is 0600 in a 0700 directory
// and is locked while open (a second daemon on the same state directory is refused). A
// file that cannot be read (torn, corrupt, or written by another version of this
// package) is never overwritten: Open returns an error naming the file and what to do.
package store

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/kennel-dev/kennel/transports"
)

// Version is the layout this package writes and reads.
const Version = 1

// Errors a caller decides on with errors.Is.
var (
	// ErrUnreadable: the file is not a store this version can read (corrupt, torn, another
	// version's). The daemon must not start on it; the error names the file.
	ErrUnreadable = errdefs.ErrDataLoss.WithMessage("state store unreadable")
	// ErrLocked: another process holds the store open.
	ErrLocked = errdefs.ErrConflict.WithMessage("state store in use by another process")
	// ErrNoSession: no session of that id is stored.
	ErrNoSession = errdefs.ErrNotFound.WithMessage("no such session in the store")
	// ErrFull: the store's disk has no room for a write; the write changed nothing, and
	// what was stored before is intact.
	ErrFull = errdefs.ErrResourceExhausted.WithMessage("state store: no space left on its disk")
)

// writeErr classes a failed write: a full disk is ErrFull.
func writeErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	return err
}

var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	keyVersion     = []byte("version")
)

// Session is one stored session: what the daemon needs to serve it again.
type Session struct {
	// ID is the session's id.
	ID string `json:"id"`
	// Created is when the session was created.
	Created time.Time `json:"created"`
	// Request is the API request that created it (its transport, cwd, limits), as JSON.
	Request json.RawMessage `json:"request"`
	// Spec is the transport that was assembled for it (the request's or the default), as
	// JSON; null for a local kernel.
	Spec json.RawMessage `json:"spec"`
	// Cwd is the working directory the request resolved to.
	Cwd string `json:"cwd"`
	// Parent and Workspace are a child session's parent and workspace directory.
	Parent    string `json:"parent,omitempty"`
	Workspace string `json:"workspace,omitempty"`
	// Epoch counts the daemon starts that served the session: 0 for the one that created
	// it. The daemon numbers cell and job ids from Epoch*IDsPerEpoch, so ids stay unique
	// across restarts (a kernel keeps its newest cells' ids).
	Epoch uint64 `json:"epoch"`
	// Kernel is the record of its current detached kernel, or nil.
	Kernel *transports.Record `json:"kernel,omitempty"`
}

// IDsPerEpoch is how many cell and job ids one daemon lifetime gives a session before
// its ids would reach the next epoch's.
const IDsPerEpoch = 1_000_000

// Store is an open state store. Its methods are safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
}

// Open opens (or creates) the store at path, whose directory must exist. A new file is
// made 0600; an existing one must be a store of this Version. It waits at most a second
// for another process's lock (then ErrLocked).
func Open(path string) (*Store, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("state store %s: %w: not a regular file; move it away", path, ErrUnreadable)
	case err == nil && fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("state store %s: mode %v lets others read it: %w; chmod 600 it", path, fi.Mode().Perm(), errdefs.ErrPermissionDenied)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("state store %s: %w", path, err)
	}
	fresh := errors.Is(err, os.ErrNotExist)
	if !fresh {
		// Read-only first: a file that is not wholly a store of this version is refused
		// before anything could write to it.
		db, err := openDB(path, true)
		if err != nil {
			return nil, err
		}
		err = (&Store{db: db, path: path}).check()
		db.Close()
		if err != nil {
			return nil, err
		}
	}
	db, err := openDB(path, false)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: path}
	if err := s.init(fresh); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// openDB opens the file, turning what bbolt reports into the package's errors. bbolt
// panics on some corrupt pages; a panic while opening is such a file.
func openDB(path string, readOnly bool) (db *bolt.DB, err error) {
	// A torn file's pages past its end fault (SIGBUS) when read through the map: as a
	// panic on this goroutine, not the end of the process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("state store %s: %w (%v); it is kept as it is: move it away to start with no sessions, or restore a backup", path, ErrUnreadable, r)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: readOnly})
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("state store %s: %w: is another kennel serve running on this state directory?", path, ErrLocked)
	}
	// Anything else (invalid, version mismatch, checksum, mapping, ...) is an unreadable file.
	return nil, fmt.Errorf("state store %s: %w (%v); it is kept as it is: move it away to start with no sessions, or restore a backup", path, ErrUnreadable, err)
}

// unreadable is the error of a file that is not wholly a readable store.
func (s *Store) unreadable(why string) error {
	return fmt.Errorf("state store %s: %w: %s; it is kept as it is: move it away to start with no sessions, or restore a backup", s.path, ErrUnreadable, why)
}

// checkVersion refuses a layout version other than Version.
func (s *Store) checkVersion(meta *bolt.Bucket) error {
	if v := string(meta.Get(keyVersion)); v != fmt.Sprint(Version) {
		return fmt.Errorf("state store %s: %w: layout version %q, this kennel reads %d; run the kennel that wrote it, or move the file away", s.path, ErrUnreadable, v, Version)
	}
	return nil
}

// check reads the whole store on this goroutine: the layout version and every session
// record, so every page they are on; a page past a torn file's end faults into a panic
// that is the file's refusal.
func (s *Store) check() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = s.unreadable(fmt.Sprint(r))
		}
	}()
	return s.db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return s.unreadable("no layout version")
		}
		if err := s.checkVersion(meta); err != nil {
			return err
		}
		sessions := tx.Bucket(bucketSessions)
		if sessions == nil {
			return s.unreadable("no sessions bucket")
		}
		err := sessions.ForEach(func(k, v []byte) error {
			var sess Session
			if err := json.Unmarshal(v, &sess); err != nil || sess.ID != string(k) {
				return s.unreadable(fmt.Sprintf("session %q: %v", k, err))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := checkRecords(s, tx, bucketCells, "cell", func(c Cell) string { return c.Key }); err != nil {
			return err
		}
		return checkRecords(s, tx, bucketJobs, "job", func(j Job) string { return j.ID })
	})
}

// checkRecords decodes every record of kind under root, each under its own key.
func checkRecords[T any](s *Store, tx *bolt.Tx, root []byte, kind string, key func(T) string) error {
	r := tx.Bucket(root)
	if r == nil {
		return nil
	}
	return r.ForEachBucket(func(id []byte) error {
		return r.Bucket(id).ForEach(func(k, v []byte) error {
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil || key(rec) != string(k) {
				return s.unreadable(fmt.Sprintf("%s %q of session %q: %v", kind, k, id, err))
			}
			return nil
		})
	})
}

// init checks the layout version, writing it into a fresh file.
func (s *Store) init(fresh bool) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			if !fresh && tx.Bucket(bucketSessions) != nil {
				return fmt.Errorf("state store %s: %w: it has sessions but no version", s.path, ErrUnreadable)
			}
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
			if err := meta.Put(keyVersion, []byte(fmt.Sprint(Version))); err != nil {
				return err
			}
		}
		if err := s.checkVersion(meta); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketSessions)
		return err
	})
}

// Close closes the file (and releases its lock).
func (s *Store) Close() error { return s.db.Close() }

// Put stores sess whole, replacing what its id held.
func (s *Store) Put(sess Session) error {
	if sess.ID == "" {
		return fmt.Errorf("store session: %w: no id", errdefs.ErrInvalidArgument)
	}
	b, err := json.Marshal(sess)
	if err != nil {
		return fmt.Errorf("store session %s: %w", sess.ID, err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSessions).Put([]byte(sess.ID), b) }); err != nil {
		return fmt.Errorf("store session %s in %s: %w", sess.ID, s.path, writeErr(err))
	}
	return nil
}

// Update changes the stored session id through f, in one transaction. A session not
// stored is ErrNoSession; an error of f changes nothing.
func (s *Store) Update(id string, f func(*Session) error) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket(bucketSessions)
		raw := bk.Get([]byte(id))
		if raw == nil {
			return fmt.Errorf("session %s: %w", id, ErrNoSession)
		}
		var sess Session
		if err := json.Unmarshal(raw, &sess); err != nil {
			return fmt.Errorf("session %s: %w: %v", id, ErrUnreadable, err)
		}
		if err := f(&sess); err != nil {
			return err
		}
		sess.ID = id
		b, err := json.Marshal(sess)
		if err != nil {
			return err
		}
		return bk.Put([]byte(id), b)
	})
	if err != nil {
		return fmt.Errorf("update session %s in %s: %w", id, s.path, writeErr(err))
	}
	return nil
}

// Delete forgets session id and its cell and job records (nothing when it is not stored).
func (s *Store) Delete(id string) error {
	if err := s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketCells, bucketJobs} {
			if root := tx.Bucket(name); root != nil && root.Bucket([]byte(id)) != nil {
				if err := root.DeleteBucket([]byte(id)); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketSessions).Delete([]byte(id))
	}); err != nil {
		return fmt.Errorf("delete session %s from %s: %w", id, s.path, writeErr(err))
	}
	return nil
}

// Sessions lists the stored sessions in id order. A record that cannot be decoded is
// ErrUnreadable, naming it: nothing is skipped silently.
func (s *Store) Sessions() ([]Session, error) {
	var out []Session
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			var sess Session
			if err := json.Unmarshal(v, &sess); err != nil || sess.ID != string(k) {
				return fmt.Errorf("state store %s: session %q: %w: %v", s.path, k, ErrUnreadable, err)
			}
			out = append(out, sess)
			return nil
		})
	})
	return out, err
}

// DefaultPath is the store's file in state directory dir.
func DefaultPath(dir string) string { return filepath.Join(dir, "state.db") }

// Cell is one idempotent cell request of a session (an Idempotency-Key on its POST): what
// the daemon answers a retry with, across restarts.
type Cell struct {
	// Key is the request's idempotency key.
	Key string `json:"key"`
	// Cell is the cell's id in the kernel (the id its execute frame carries).
	Cell string `json:"cell"`
	// Code is the cell's code, to drive it again after a restart (a kernel answers a cell
	// it finished by its done again, and ignores one it runs).
	Code string `json:"code"`
	// Job is the id of the job tracking it in the daemon that runs it now.
	Job string `json:"job"`
	// Epoch is the daemon start that Job belongs to.
	Epoch uint64 `json:"epoch"`
	// State is CellRunning, CellSettled or CellUnknown.
	State string `json:"state"`
	// Reply is the settled reply (the API's CellReply), once State is CellSettled.
	Reply json.RawMessage `json:"reply,omitempty"`
	// Seq orders a session's cell records (oldest first) for the bound.
	Seq uint64 `json:"seq"`
}

// The states of a Cell.
const (
	CellRunning = "running"
	CellSettled = "settled"
	// CellUnknown: the cell was sent to a kernel that is gone; whether it ran is unknown,
	// and it is never sent again.
	CellUnknown = "unknown"
)

// MaxCells bounds the cell records a session keeps: the oldest go first.
const MaxCells = 1024

var bucketCells = []byte("cells")

// PutCell stores c for session id, replacing the record of its key; a new record past
// MaxCells makes the oldest go.
func (s *Store) PutCell(id string, c Cell) error {
	if c.Key == "" {
		return fmt.Errorf("store cell: %w: no key", errdefs.ErrInvalidArgument)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		_, err := putRecord(tx, bucketCells, id, c.Key, &c, func(c *Cell) *uint64 { return &c.Seq }, MaxCells, func(*Cell) bool { return true })
		return err
	})
	if err != nil {
		return fmt.Errorf("store cell %q of session %s in %s: %w", c.Key, id, s.path, writeErr(err))
	}
	return nil
}

// putRecord stores rec under key in session id's bucket of root: a record it replaces
// keeps its seq, a new one takes the bucket's next, and a new one past max first makes
// room by dropping the droppable record of the lowest seq, which it returns (nil: none).
func putRecord[T any](tx *bolt.Tx, root []byte, id, key string, rec *T, seq func(*T) *uint64, max int, droppable func(*T) bool) (dropped *T, err error) {
	r, err := tx.CreateBucketIfNotExists(root)
	if err != nil {
		return nil, err
	}
	bk, err := r.CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return nil, err
	}
	if old := bk.Get([]byte(key)); old != nil {
		var prev T
		if json.Unmarshal(old, &prev) == nil {
			*seq(rec) = *seq(&prev)
		}
	} else {
		if *seq(rec), err = bk.NextSequence(); err != nil {
			return nil, err
		}
		if bk.Stats().KeyN >= max {
			if dropped, err = dropOldest(bk, seq, droppable); err != nil {
				return nil, err
			}
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	return dropped, bk.Put([]byte(key), b)
}

// dropOldest deletes the droppable record of the lowest seq, if any, and returns it.
func dropOldest[T any](bk *bolt.Bucket, seq func(*T) *uint64, droppable func(*T) bool) (*T, error) {
	var oldest *T
	var oldestKey []byte
	err := bk.ForEach(func(k, v []byte) error {
		rec := new(T)
		if json.Unmarshal(v, rec) == nil && droppable(rec) && (oldest == nil || *seq(rec) < *seq(oldest)) {
			oldest, oldestKey = rec, append([]byte(nil), k...)
		}
		return nil
	})
	if err != nil || oldest == nil {
		return nil, err
	}
	return oldest, bk.Delete(oldestKey)
}

// CellOf returns session id's record of key (ok false when there is none).
func (s *Store) CellOf(id, key string) (c Cell, ok bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		bk := sessionBucket(tx, bucketCells, id)
		if bk == nil {
			return nil
		}
		raw := bk.Get([]byte(key))
		if raw == nil {
			return nil
		}
		ok = true
		if err := json.Unmarshal(raw, &c); err != nil {
			return fmt.Errorf("state store %s: cell %q of session %s: %w: %v", s.path, key, id, ErrUnreadable, err)
		}
		return nil
	})
	return c, ok, err
}

// Cells lists session id's cell records, oldest first.
func (s *Store) Cells(id string) ([]Cell, error) {
	return records(s, bucketCells, "cell", id, func(c Cell) uint64 { return c.Seq })
}

// sessionBucket is session id's bucket under root, or nil when there is none.
func sessionBucket(tx *bolt.Tx, root []byte, id string) *bolt.Bucket {
	if r := tx.Bucket(root); r != nil {
		return r.Bucket([]byte(id))
	}
	return nil
}

// records lists the records of kind (decoded as T) of session id under root, ordered by
// seq. A record that does not decode is ErrUnreadable, naming it.
func records[T any](s *Store, root []byte, kind, id string, seq func(T) uint64) ([]T, error) {
	var out []T
	err := s.db.View(func(tx *bolt.Tx) error {
		bk := sessionBucket(tx, root, id)
		if bk == nil {
			return nil
		}
		return bk.ForEach(func(k, v []byte) error {
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("state store %s: %s %q of session %s: %w: %v", s.path, kind, k, id, ErrUnreadable, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(seq(a), seq(b)) })
	return out, err
}

// Job is one job of a session as the daemon recorded it: what `kennel jobs` and `kennel
// logs` answer with after a restart, when the job table that ran it is gone.
type Job struct {
	// ID is the job's id in its session ("j12").
	ID string `json:"id"`
	// Epoch is the daemon start whose table ran it.
	Epoch uint64 `json:"epoch"`
	// Command is its command (a cell job's first line).
	Command string `json:"command"`
	// Started is when it started.
	Started time.Time `json:"started"`
	// State is JobRunning until its end is recorded, then JobEnded.
	State string `json:"state"`
	// End is how it ended (the API's JobEnd), once State is JobEnded.
	End json.RawMessage `json:"end,omitempty"`
	// Seen is how many bytes of output it wrote.
	Seen int64 `json:"seen"`
	// Kept is the file holding the start of its output, Seen bytes or fewer ("" none).
	Kept string `json:"kept,omitempty"`
	// Seq orders a session's job records for the bound.
	Seq uint64 `json:"seq"`
	// Resume is what a later controller needs to pick the job up while it runs (the
	// controller's JobRecord, opaque here); gone once the job's end is recorded.
	Resume json.RawMessage `json:"resume,omitempty"`
}

// The states of a Job.
const (
	JobRunning = "running"
	JobEnded   = "ended"
)

// MaxJobs bounds the job records a session keeps: past it the oldest ended one goes
// (PutJob returns it so its kept file can go too).
const MaxJobs = 256

var bucketJobs = []byte("jobs")

// PutJob stores j for session id, replacing the record of its id; when the session's
// records pass MaxJobs the oldest ended one is dropped and returned. A session not stored
// (deleted) is ErrNoSession, and nothing is kept.
func (s *Store) PutJob(id string, j Job) (dropped *Job, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketSessions).Get([]byte(id)) == nil {
			return fmt.Errorf("session %s: %w", id, ErrNoSession) // deleted: its jobs go with it
		}
		var err error
		dropped, err = putRecord(tx, bucketJobs, id, j.ID, &j, func(j *Job) *uint64 { return &j.Seq }, MaxJobs, func(j *Job) bool { return j.State == JobEnded })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store job %s of session %s in %s: %w", j.ID, id, s.path, writeErr(err))
	}
	return dropped, nil
}

// Jobs lists session id's job records, oldest first.
func (s *Store) Jobs(id string) ([]Job, error) {
	return records(s, bucketJobs, "job", id, func(j Job) uint64 { return j.Seq })
}
