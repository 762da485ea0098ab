package reset

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PCI functions are unbound, reset and bound through sysfs
// (Documentation/ABI/testing/sysfs-bus-pci): writing the address to the
// driver's unbind and bind files, and 1 to the function's reset file.
// reset_method (5.15+) orders the kernel's reset methods; writing one name
// restricts the reset to it.

func writeSys(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// unbindPCI unbinds the function's driver. With a provider that cannot
// disassociate, the kernel blocks here until every user has closed the
// device.
func unbindPCI(sysRoot, addr, driver string) error {
	if err := writeSys(filepath.Join(sysRoot, "bus", "pci", "drivers", driver, "unbind"), addr); err != nil {
		return fmt.Errorf("reset: unbind %s from %s: %w", addr, driver, err)
	}
	return nil
}

// bindPCI binds the function to driver again.
func bindPCI(sysRoot, addr, driver string) error {
	if err := writeSys(filepath.Join(sysRoot, "bus", "pci", "drivers", driver, "bind"), addr); err != nil {
		return fmt.Errorf("reset: bind %s to %s: %w", addr, driver, err)
	}
	return nil
}

// resetPCI resets the (unbound) function. With flr, it asks for a function
// level reset only, through reset_method, and restores the method list
// afterwards.
func resetPCI(sysRoot, addr string, flr bool) (err error) {
	dir := filepath.Join(sysRoot, "bus", "pci", "devices", addr)
	if flr {
		old, err := os.ReadFile(filepath.Join(dir, "reset_method"))
		if err != nil {
			return fmt.Errorf("reset: read reset methods of %s: %w", addr, err)
		}
		if err := writeSys(filepath.Join(dir, "reset_method"), "flr"); err != nil {
			return fmt.Errorf("reset: choose FLR for %s: %w", addr, err)
		}
		defer func() {
			if rerr := writeSys(filepath.Join(dir, "reset_method"), strings.TrimSpace(string(old))); rerr != nil && err == nil {
				err = fmt.Errorf("reset: restore the reset methods of %s: %w", addr, rerr)
			}
		}()
	}
	if err := writeSys(filepath.Join(dir, "reset"), "1"); err != nil {
		return fmt.Errorf("reset: reset PCI function %s: %w", addr, err)
	}
	return nil
}
