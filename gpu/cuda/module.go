package cuda

import (
	"fmt"
	"unsafe"
)

// LoadModule loads a module from PTX text (the driver JIT-compiles it for
// the device); name labels it in errors, e.g. its file's name. Its kernels
// are then found by their extern "C" names (device thread).
func (d *Device) LoadModule(name string, ptx []byte) error {
	img := append(ptx[:len(ptx):len(ptx)], 0) // the driver reads a C string
	var mod uintptr
	if err := d.drv.check(d.drv.call(fnModuleLoadData, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&img[0]))), "cuModuleLoadData "+name); err != nil {
		return err
	}
	d.mods = append(d.mods, mod)
	return nil
}

// Function finds kernel name in the loaded modules and returns its
// CUfunction; Launch and the kernel attributes find kernels through it
// (device thread).
func (d *Device) Function(name string) (uintptr, error) {
	if f, ok := d.funcs[name]; ok {
		return f, nil
	}
	cname := append([]byte(name), 0)
	for _, m := range d.mods {
		var f uintptr
		if d.drv.call(fnModuleGetFunction, uintptr(unsafe.Pointer(&f)), m, uintptr(unsafe.Pointer(&cname[0]))) == cuSuccess {
			d.funcs[name] = f
			return f, nil
		}
	}
	return 0, fmt.Errorf("cuda: kernel %q is in no loaded module", name)
}
