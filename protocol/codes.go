package protocol

// Code is the machine-readable error code a host_reply carries. Errors cross the
// boundary as a Code; the message beside it is for people and is never matched.
type Code string

// The codes of protocol version 1.
const (
	// CodeTooLarge: the host request's line was over MaxLine (from the gate).
	CodeTooLarge Code = "too_large"
	// CodeUnserved: no handler serves the request's type (from the gate).
	CodeUnserved Code = "unserved"
	// CodeNoType: the request has no type in its head (from the gate).
	CodeNoType Code = "no_type"
	// CodeDuplicate: the request's id is already in use (from the gate); the reply has
	// status "duplicate".
	CodeDuplicate Code = "duplicate"
	// CodeInvalid: bad arguments.
	CodeInvalid Code = "invalid"
	// CodeOutside: a path outside every mount (a path refusal, with reason and version).
	CodeOutside Code = "outside"
	// CodeReadOnly: a write to a read-only mount (a path refusal, with reason and version).
	CodeReadOnly Code = "read_only"
	// CodeNotFound: the named thing does not exist.
	CodeNotFound Code = "not_found"
	// CodeBinary: a text operation on a binary file.
	CodeBinary Code = "binary"
	// CodeNoMatch: an edit or search found nothing.
	CodeNoMatch Code = "no_match"
	// CodeAmbiguous: an edit matched more than once.
	CodeAmbiguous Code = "ambiguous"
	// CodeLoop: a symlink loop.
	CodeLoop Code = "loop"
	// CodeExists: the destination of a write or move exists and may not be replaced.
	CodeExists Code = "exists"
	// CodeCrossDevice: a move between two file systems that the host will not copy.
	CodeCrossDevice Code = "cross_device"
	// CodeChanged: the file changed between its check and its use; the request may be retried.
	CodeChanged Code = "changed"
	// CodeDenied: the host's own permissions refused the operation.
	CodeDenied Code = "denied"
	// CodeNoSpace: a write, edit or move found the host's file system full or a disk
	// quota used up (ENOSPC, EDQUOT). The file it was writing keeps its old content and
	// no partial file is left; it may succeed once there is room.
	CodeNoSpace Code = "no_space"
	// CodeUnavailable: the host cannot serve this kind of request for this kernel at all
	// (a remote workspace whose host has no SFTP subsystem); the message says why.
	CodeUnavailable Code = "unavailable"
	// CodeInternal: the host failed; not the kernel's fault.
	CodeInternal Code = "internal"
)

// Valid reports whether c is one of the codes of protocol version 1.
func (c Code) Valid() bool {
	switch c {
	case CodeTooLarge, CodeUnserved, CodeNoType, CodeDuplicate, CodeInvalid, CodeOutside,
		CodeReadOnly, CodeNotFound, CodeBinary, CodeNoMatch, CodeAmbiguous, CodeLoop,
		CodeExists, CodeCrossDevice, CodeChanged, CodeDenied, CodeNoSpace, CodeUnavailable, CodeInternal:
		return true
	}
	return false
}
