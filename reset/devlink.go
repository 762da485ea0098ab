package reset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Devlink is reached through generic netlink with
// github.com/mdlayher/genetlink (the family "devlink", constants from
// x/sys/unix, which mirrors include/uapi/linux/devlink.h).

// devlinkHandle names a devlink instance: the bus and device name of the
// device it belongs to ("pci" "0000:3b:00.0", "netdevsim" "netdevsim10").
type devlinkHandle struct{ bus, dev string }

func (h devlinkHandle) String() string { return h.bus + "/" + h.dev }

// devlinkEncode encodes the handle's attributes.
func (h devlinkHandle) encode(ae *netlink.AttributeEncoder) {
	ae.String(unix.DEVLINK_ATTR_BUS_NAME, h.bus)
	ae.String(unix.DEVLINK_ATTR_DEV_NAME, h.dev)
}

// deviceHandle is the devlink handle a device directory (a class device's
// "device" link) would have: its bus and name.
func deviceHandle(devLink string) (devlinkHandle, error) {
	sub, err := os.Readlink(filepath.Join(devLink, "subsystem"))
	if err != nil {
		return devlinkHandle{}, err
	}
	resolved, err := filepath.EvalSymlinks(devLink)
	if err != nil {
		return devlinkHandle{}, err
	}
	return devlinkHandle{bus: filepath.Base(sub), dev: filepath.Base(resolved)}, nil
}

// devlinkConn is a devlink generic netlink connection.
type devlinkConn struct {
	c   *genetlink.Conn
	fam genetlink.Family
}

func dialDevlink() (*devlinkConn, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("reset: generic netlink: %w", err)
	}
	fam, err := c.GetFamily(unix.DEVLINK_GENL_NAME)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("reset: devlink family: %w", err)
	}
	return &devlinkConn{c: c, fam: fam}, nil
}

func (d *devlinkConn) Close() error { return d.c.Close() }

func (d *devlinkConn) do(cmd uint8, h devlinkHandle, more func(*netlink.AttributeEncoder)) error {
	ae := netlink.NewAttributeEncoder()
	h.encode(ae)
	if more != nil {
		more(ae)
	}
	b, err := ae.Encode()
	if err != nil {
		return err
	}
	_, err = d.c.Execute(genetlink.Message{Header: genetlink.Header{Command: cmd, Version: d.fam.Version}, Data: b},
		d.fam.ID, netlink.Request|netlink.Acknowledge)
	return err
}

// hasDevlink reports whether the device has a devlink instance.
func hasDevlink(h devlinkHandle) (bool, error) {
	d, err := dialDevlink()
	if err != nil {
		return false, err
	}
	defer d.Close()
	err = d.do(unix.DEVLINK_CMD_GET, h, nil)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL):
		return false, nil
	}
	return false, fmt.Errorf("reset: get devlink %s: %w", h, err)
}

// devlinkReload asks the driver to re-initialise (DEVLINK_CMD_RELOAD,
// action driver_reinit): it removes and re-creates its ports and netdevs.
// A driver without reload gets an error matching ErrReloadNotSupported.
func devlinkReload(h devlinkHandle) error {
	d, err := dialDevlink()
	if err != nil {
		return err
	}
	defer d.Close()
	err = d.do(unix.DEVLINK_CMD_RELOAD, h, func(ae *netlink.AttributeEncoder) {
		ae.Uint8(unix.DEVLINK_ATTR_RELOAD_ACTION, unix.DEVLINK_RELOAD_ACTION_DRIVER_REINIT)
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("reset: devlink reload of %s: %w", h, ErrReloadNotSupported)
	}
	if err != nil {
		return fmt.Errorf("reset: devlink reload of %s: %w", h, err)
	}
	return nil
}

// ErrReloadNotSupported is matched when the driver has a devlink instance
// but no reload (driver_reinit).
var ErrReloadNotSupported = errors.New("driver_reinit is not supported by this driver")
