package rename

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rdmatool/rdmatool/internal/quote"
	"github.com/rdmatool/rdmatool/rdmanl"
)

// maxNameLen is the longest name the kernel keeps: IB_DEVICE_NAME_MAX (64,
// include/rdma/ib_verbs.h) counts the terminating NUL.
const maxNameLen = 63

// ErrInvalidName is matched by the errors of ValidateName.
var ErrInvalidName = errors.New("invalid device name")

// NameError says why a name cannot be a device name.
type NameError struct {
	Name   string
	Reason string // "contains '/'"
}

func (e *NameError) Error() string { return "invalid name " + quote.String(e.Name) + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalidName) true.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName }

// ValidateName reports why name cannot, or should not, name an RDMA device.
// The kernel refuses empty names, cuts names at 63 bytes, reads '%' as an
// allocation pattern, and makes the name a sysfs directory, so '/', "." and
// ".." are out. Whitespace, control characters and invalid UTF-8 are
// accepted by the kernel but break udev rules, shell scripts and logs, so
// they are refused too, and so are invisible format characters (Unicode
// category Cf: U+200B zero width space, U+202E right-to-left override,
// U+FEFF, ...), which make a name look like another.
func ValidateName(name string) error {
	reason := ""
	format := strings.IndexFunc(name, isFormat)
	switch {
	case name == "":
		reason = "empty"
	case len(name) > maxNameLen:
		reason = fmt.Sprintf("%d bytes long, the kernel keeps at most %d", len(name), maxNameLen)
	case name == "." || name == "..":
		reason = "reserved by sysfs"
	case strings.ContainsRune(name, '/'):
		reason = "contains '/'"
	case strings.ContainsRune(name, '%'):
		reason = "contains '%' (the kernel reads it as a name pattern)"
	case !utf8.ValidString(name):
		reason = "not valid UTF-8"
	case strings.IndexFunc(name, unicode.IsSpace) >= 0:
		reason = "contains whitespace"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		reason = "contains a control character"
	case format >= 0:
		r, _ := utf8.DecodeRuneInString(name[format:])
		reason = fmt.Sprintf("contains the invisible format character %U", r)
	default:
		return nil
	}
	return &NameError{Name: name, Reason: reason}
}

// isFormat reports whether r is an invisible format character (Unicode
// category Cf).
func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }

// namePrefix is rdma_rename's prefix for a device: the protocol the kernel
// reports (RDMA_NLDEV_ATTR_DEV_PROTOCOL: "ib", "roce", "iw", "opa",
// "usnic"), copied as it is, or "rdma" when the kernel sends none (before
// 5.2, or a device of no known protocol).
func namePrefix(protocol string) string {
	if protocol == "" {
		return "rdma"
	}
	return protocol
}

// errZeroGUID is why the guid and map policies skip a device.
var errZeroGUID = errors.New("node GUID is zero")

// guidPolicyName is the name rdma-core's rdma_rename gives d under NAME_GUID: the
// protocol prefix, "x", and the node GUID as 16 lower-case hex digits, most
// significant first ("rocex525400c0fe123455"). A device whose node GUID is
// zero has no such name.
func guidPolicyName(d rdmanl.Device) (string, error) {
	if d.NodeGUID == 0 {
		return "", errZeroGUID
	}
	return fmt.Sprintf("%sx%016x", namePrefix(d.Protocol), uint64(d.NodeGUID)), nil
}
