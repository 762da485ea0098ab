package watch

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/rdmatool/rdmatool/leakwatch"
	"github.com/rdmatool/rdmatool/rdmanl"
	"github.com/rdmatool/rdmatool/sysfs"
	"github.com/rdmatool/rdmatool/uverbs"
	"golang.org/x/sys/unix"
)

// DeviceFacts are what a watch learns of a device once, when it appears:
// its provider, what the provider table says of its LAST_WQE_REACHED, and
// its QP limit as the device reports it.
type DeviceFacts struct {
	Provider      string // kernel driver: rxe, siw, mlx5, ... ("" unknown)
	LastWQE       leakwatch.LastWQE
	LastWQESource string
	MaxQP         uint64 // 0: the device did not say (MaxQPErr says why)
	MaxQPErr      string
}

// softVendors are the vendor ids the software providers report in a
// verbs query, which is how a device with no PCI function is told apart.
var softVendors = map[uint32]string{
	0xffffff: "rxe", // RXE_VENDOR_ID
	0x626d74: "siw", // SIW_VENDOR_ID, "bmt"
}

// providerDrivers names the provider behind a PCI function's driver where
// the two differ (the RDMA half is an auxiliary driver). Only rxe and siw
// (by vendor id) are proven in the lab; these follow the drivers' names in
// the kernel tree and are unverified on hardware.
var providerDrivers = map[string]string{
	"mlx5_core": "mlx5", "mlx5_ib": "mlx5", "mlx4_core": "mlx4", "mlx4_ib": "mlx4",
	"qede": "qedr", "bnxt_en": "bnxt_re", "ice": "irdma", "i40e": "irdma",
}

// LearnDevice reads dev's facts from the host: the provider from the PCI
// function's driver under sysRoot, else from the vendor id a verbs query
// returns (software devices); max_qp from that verbs query on the device's
// uverbs character device under devRoot (normally /dev); the provider
// table for the running kernel. What cannot be learned stays unknown.
func LearnDevice(sysRoot, devRoot string, dev rdmanl.Device) DeviceFacts {
	var f DeviceFacts
	if fn, err := sysfs.ReadPCIFunction(sysRoot, dev.Name); err == nil && fn.Driver != "" {
		f.Provider = fn.Driver
		if p, ok := providerDrivers[fn.Driver]; ok {
			f.Provider = p
		}
	}
	attrs, err := queryVerbs(sysRoot, devRoot, dev.Name)
	switch {
	case err != nil:
		f.MaxQPErr = err.Error()
	case attrs.NodeGUID != uint64(dev.NodeGUID):
		// The uverbs device was re-used by another device meanwhile.
		f.MaxQPErr = fmt.Sprintf("the verbs query answered for node GUID %s, not %s", rdmanl.GUID(attrs.NodeGUID), dev.NodeGUID)
	default:
		f.MaxQP = uint64(attrs.MaxQP)
		if f.Provider == "" {
			f.Provider = softVendors[attrs.VendorID]
		}
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil && f.Provider != "" {
		f.LastWQE, f.LastWQESource = leakwatch.ProviderLastWQE(f.Provider, unix.ByteSliceToString(uts.Release[:]))
	}
	return f
}

// queryVerbs runs the verbs query on dev's uverbs device.
func queryVerbs(sysRoot, devRoot, dev string) (uverbs.DeviceAttr, error) {
	uv, err := sysfs.ReadUverbs(sysRoot)
	if err != nil {
		return uverbs.DeviceAttr{}, err
	}
	for _, u := range uv {
		if u.Device == dev {
			return uverbs.QueryDevice(filepath.Join(devRoot, "infiniband", u.Name))
		}
	}
	return uverbs.DeviceAttr{}, errors.New("no uverbs device (ib_uverbs not loaded?)")
}

// FactsCache learns each device once, by index and node GUID (a device
// re-registered under the same index is learned again). It is safe for
// concurrent use: the agent's scanners share one.
type FactsCache struct {
	mu    sync.Mutex
	learn func(rdmanl.Device) DeviceFacts
	facts map[factsKey]DeviceFacts
}

type factsKey struct {
	index uint32
	guid  rdmanl.GUID
}

// NewFactsCache returns a cache that learns with learn (Deps.LearnDevice;
// nil learns nothing).
func NewFactsCache(learn func(rdmanl.Device) DeviceFacts) *FactsCache {
	return &FactsCache{learn: learn, facts: map[factsKey]DeviceFacts{}}
}

// Of returns dev's facts, learning them on first use; learned reports
// that they were learned now. A nil cache knows none.
func (c *FactsCache) Of(dev rdmanl.Device) (f DeviceFacts, learned bool) {
	if c == nil || c.learn == nil {
		return DeviceFacts{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := factsKey{dev.Index, dev.NodeGUID}
	if f, ok := c.facts[k]; ok {
		return f, false
	}
	f = c.learn(dev)
	c.facts[k] = f
	return f, true
}
