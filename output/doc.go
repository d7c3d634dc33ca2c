// Package output bounds and retains the output of tool calls, cells and jobs: every byte
// is either kept or counted as dropped, and memory stays bounded whatever a kernel writes.
//
// It has two halves.
//
// Truncation is the one setting that bounds a reported output: On(Limits{Bytes, Lines,
// Keep}) keeps whole lines from the head or the tail within the limits (else the first
// line cut at a UTF-8 character boundary) and counts the rest as dropped; Off keeps every
// byte. The default is 50 KiB and 2000 lines. Resolve decides a call's value in one place.
// Bound applies it to a whole text; a Bounder applies it to a stream, chunk by chunk,
// with the same result, storing only what the window can come from and writing the full
// output to a private artifact file once it passes the bound.
//
// Capture is the retained output of one cell or job: the first 1 MiB in memory, the last
// 64 KiB once there is more, and a private spill file with every byte from offset 0 up to
// 16 MiB. It is read in pages of at most 64 KiB by byte offset, also while it is written;
// a read that asks for more, or that would cross bytes that were not retained, is refused
// with a *ReadError naming a read that works, never shortened. Bound makes a report of
// it under a Truncation for one caller (the capture keeps none, so its memory stays its
// head and tail, even under Off; Off then keeps what was retained and counts the rest as
// dropped, and the report's Retained names the ranges that can still be read). Save
// writes the exact bytes to a file atomically. Prune removes old spill files. Captures makes the captures of one
// set of options, checked once (a job table makes one per job). A Follower streams a
// capture to a writer while it is written, within the window its report will keep, and
// completes it from the settled report: the writer ends with exactly the report's bytes.
//
// Files go only into directories that PrepareDir accepts: 0700 and owned by the user.
//
// Bounding a stream:
//
//	b, err := output.NewBounder(output.On(output.Limits{Keep: output.Tail}), output.BounderOptions{ArtifactDir: dir})
//	if err != nil {
//		return err
//	}
//	io.Copy(b, r)
//	res := b.Result()
//	fmt.Printf("%s%s\n", res.Kept, res.Notice())
//
// Reading a capture page by page:
//
//	for off := int64(0); ; {
//		page, err := c.ReadPage(off, output.MaxPage)
//		if err != nil {
//			return err // errors.Is(err, output.ErrLost): the error names a read that works
//		}
//		use(page.Data)
//		off += int64(len(page.Data))
//		if page.EOF || page.More {
//			break
//		}
//	}
package output
