// Package opfile reads the files an operator hands rdmatool (the agent's
// configuration, the rename map, the agent's state file) without trusting
// what the path names.
//
// Read takes a regular file only, after following symbolic links: a named
// pipe, a socket, a device or a directory is refused without reading from
// it. The open does not block (O_NONBLOCK), so a named pipe put in the
// file's place between the check and the open does not hang the caller, and
// a file larger than the caller's cap is refused rather than read whole, so
// a link to /dev/zero or a runaway file cannot fill memory. A refusal is an
// *Error naming the file and matching ErrNotRegular or ErrTooLarge; a file
// that cannot be opened or read gives the *fs.PathError the os package
// gives, so errors.Is(err, fs.ErrNotExist) reports a missing file. The
// callers parse the bytes and name file and line in their own errors.
// Open does the same for a caller that reads the file in pieces (the
// agent's state file, decoded as a stream), and can refuse a symbolic link
// at the path rather than follow it. ReadContext and Await give up waiting
// when a context ends, so a read stuck on a hung file system never keeps
// the agent from stopping.
//
// It only reads, needs no privileges beyond read access to the file, and
// uses the standard library and golang.org/x/sys/unix only.
package opfile
