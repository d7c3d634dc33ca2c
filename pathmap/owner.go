package pathmap

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Owner is the numeric user and group that the files and directories a Map creates on
// the host belong to (Config.Owner): the uid:gid the kernel runs as, so that what
// fs.write makes is owned like what the kernel writes itself.
type Owner struct {
	// UID is the user id, 0 to 4294967294.
	UID int
	// GID is the group id, 0 to 4294967294.
	GID int
}

// maxID is the largest uid or gid: (uid_t)-1 means "unchanged" to chown(2).
const maxID = 1<<32 - 2

// ParseOwner parses "uid:gid" in decimal (Docker's --user form with both parts
// numeric, e.g. "10001:10001"). A user or group name, a lone uid (whose group would come
// from the image's /etc/passwd) or an id out of range is refused with ErrInvalid.
func ParseOwner(s string) (Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, uerr := parseID(u)
	gid, gerr := parseID(g)
	if !ok || uerr != nil || gerr != nil {
		return Owner{}, newErr("parse owner", "", ErrInvalid, detail(fmt.Sprintf("%q is not a numeric uid:gid", cut(s, 64))))
	}
	return Owner{UID: uid, GID: gid}, nil
}

// parseID parses a decimal id of digits only.
func parseID(s string) (int, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > maxID {
		return 0, strconv.ErrRange
	}
	return int(n), nil
}

// cut shortens s to at most n bytes for a message.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// String returns "uid:gid".
func (o Owner) String() string { return strconv.Itoa(o.UID) + ":" + strconv.Itoa(o.GID) }

// checkOwner refuses an Owner out of range (ErrInvalid), or one this process cannot give
// files to (ErrDenied): another uid:gid needs CAP_CHOWN in the effective set (root has
// it); without it, only the process's own uid with its own group or a supplementary one.
func checkOwner(o Owner) error {
	if o.UID < 0 || o.UID > maxID || o.GID < 0 || o.GID > maxID {
		return newErr("start", "", ErrInvalid, detail(fmt.Sprintf("owner %s out of range (ids are 0 to %d)", o, maxID)))
	}
	if hasCapChown() {
		return nil
	}
	euid, egid := os.Geteuid(), os.Getegid()
	if o.UID == euid {
		if o.GID == egid {
			return nil
		}
		if groups, err := os.Getgroups(); err == nil && slices.Contains(groups, o.GID) {
			return nil
		}
	}
	return newErr("start", "", ErrDenied, detail(fmt.Sprintf(
		"owner %s: giving files to another uid:gid needs root or CAP_CHOWN, and kennel runs as %d:%d without it", o, euid, egid)))
}

// hasCapChown reports whether the calling thread has CAP_CHOWN in its effective set.
func hasCapChown() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[0].Effective&(1<<unix.CAP_CHOWN) != 0
}

// ownerError is a failure to give a new file or directory to the Map's Owner; its class
// is ErrDenied, whatever the errno (EPERM, or EINVAL for an id the file system or user
// namespace cannot hold).
type ownerError struct {
	owner Owner
	err   error
}

func (e *ownerError) Error() string {
	return "give it to owner " + e.owner.String() + ": " + e.err.Error()
}

func (e *ownerError) Unwrap() error { return e.err }

// fileOwner says whom a file replaceWith makes belongs to.
type fileOwner struct {
	// keepUID and keepGID are the owner to keep (a replaced or copied file's), or -1.
	keepUID, keepGID int
	// set is the Map's Owner; nil means the controller's own.
	set *Owner
}

// give sets the owner of the new file f: the one to keep, where the host allows; else
// the Map's Owner, which must succeed (*ownerError); else f stays the controller's.
func (o fileOwner) give(f *os.File) error {
	if o.keepUID >= 0 {
		err := f.Chown(o.keepUID, o.keepGID)
		if err == nil || o.set == nil {
			return nil // without an Owner, keeping the old owner is best effort
		}
	}
	if o.set == nil {
		return nil
	}
	if err := f.Chown(o.set.UID, o.set.GID); err != nil {
		return &ownerError{*o.set, errnoOf(err)}
	}
	return nil
}

// giveDir gives the directory it just made, open as fd, to the owner o. The directory
// must be empty: a non-empty one was swapped in after the mkdirat (ErrChanged), and is
// not handed over. The chown is on the descriptor, never by name.
func giveDir(fd int, o Owner) error {
	empty, err := isEmptyDir(fd)
	switch {
	case err == unix.EBADF && o.UID == os.Geteuid():
		// An O_PATH descriptor (the directory is not readable): nothing of another
		// user's can be handed over by a chown to one's own uid.
	case err != nil:
		return &ownerError{o, err}
	case !empty:
		return ErrChanged
	}
	if err := unix.Fchownat(fd, "", o.UID, o.GID, unix.AT_EMPTY_PATH); err != nil {
		return &ownerError{o, err}
	}
	return nil
}

// isEmptyDir reports whether the directory open as fd (for reading) has no entries but
// "." and "..".
func isEmptyDir(fd int) (bool, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if n <= 0 {
			return true, nil
		}
		if _, _, names := unix.ParseDirent(buf[:n], -1, nil); len(names) > 0 {
			return false, nil
		}
	}
}

// errnoOf returns the errno inside err (an *os.PathError from an os.File method), or
// err itself: messages then name the errno, not the temporary file's name.
func errnoOf(err error) error {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}
