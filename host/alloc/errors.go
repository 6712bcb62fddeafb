package alloc

import "fmt"

func errf(format string, args ...any) error {
	return fmt.Errorf("alloc: "+format, args...)
}
