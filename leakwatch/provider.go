package leakwatch

import (
	"strconv"
	"strings"
)

// LastWQE is what is known of whether a device's provider delivers
// IB_EVENT_QP_LAST_WQE_REACHED when an SRQ QP enters the Error state.
type LastWQE int

// What is known of a provider's LAST_WQE_REACHED.
const (
	LastWQEUnknown   LastWQE = iota // no table entry for this provider and kernel, and none seen
	LastWQEDelivered                // the provider delivers it
	LastWQENever                    // the provider never delivers it
)

func (l LastWQE) String() string {
	switch l {
	case LastWQEDelivered:
		return "delivered"
	case LastWQENever:
		return "never"
	}
	return "unknown"
}

// providerFact is one entry of the table: from kernel From (inclusive;
// zero: every kernel) up to kernel Until (exclusive; zero: no end), the
// provider delivers the event or not.
type providerFact struct {
	provider    string
	from, until [2]int // major, minor
	lastWQE     LastWQE
	source      string
}

// lastWQETable seeds what a provider does before an event was seen. An
// event seen on a device overrides it (the watcher learns). Every entry
// says where it comes from; kernels between the lab's measurements are
// left unknown rather than guessed.
var lastWQETable = []providerFact{
	{provider: "rxe", until: [2]int{6, 2}, lastWQE: LastWQENever,
		source: "measured in the rdmatool lab: Debian 6.1 rxe never delivers it"},
	{provider: "rxe", from: [2]int{6, 12}, lastWQE: LastWQEDelivered,
		source: "measured in the rdmatool lab: rxe delivers it on 6.12 and 7.x (about 0.5 ms after Error, and again after a WR is posted)"},
	{provider: "siw", lastWQE: LastWQENever,
		source: "measured in the rdmatool lab on 6.1, 6.12 and 7.x; siw has no code that raises IB_EVENT_QP_LAST_WQE_REACHED"},
	{provider: "mlx5", lastWQE: LastWQEDelivered,
		source: "mlx5_ib maps the HCA's MLX5_EVENT_TYPE_SRQ_LAST_WQE to IB_EVENT_QP_LAST_WQE_REACHED (drivers/infiniband/hw/mlx5/qp.c)"},
	{provider: "mlx4", lastWQE: LastWQEDelivered,
		source: "mlx4_ib maps the HCA's MLX4_EVENT_TYPE_SRQ_QP_LAST_WQE to IB_EVENT_QP_LAST_WQE_REACHED (drivers/infiniband/hw/mlx4/qp.c)"},
	{provider: "irdma", lastWQE: LastWQENever,
		source: "field reports: irdma does not deliver it, so the kernel's SRQ drain (6.11+) waits out its 60 s"},
	{provider: "qedr", lastWQE: LastWQENever,
		source: "field reports: qedr does not deliver it"},
}

// ProviderLastWQE says what the table knows of provider (the kernel
// driver's name: rxe, siw, mlx5, ...) on the kernel release (uname -r:
// "6.12.43+deb13-amd64"), and where that comes from.
func ProviderLastWQE(provider, release string) (LastWQE, string) {
	v, ok := kernelVersion(release)
	for _, f := range lastWQETable {
		if f.provider != provider {
			continue
		}
		if f.from != ([2]int{}) || f.until != ([2]int{}) {
			if !ok || (f.from != ([2]int{}) && less(v, f.from)) || (f.until != ([2]int{}) && !less(v, f.until)) {
				continue
			}
		}
		return f.lastWQE, f.source
	}
	return LastWQEUnknown, ""
}

func less(a, b [2]int) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }

// kernelVersion reads major and minor from a release string.
func kernelVersion(release string) ([2]int, bool) {
	major, rest, ok := strings.Cut(release, ".")
	if !ok {
		return [2]int{}, false
	}
	minor := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minor = rest[:i]
	}
	a, err1 := strconv.Atoi(major)
	b, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{a, b}, true
}
