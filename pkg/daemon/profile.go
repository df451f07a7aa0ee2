package daemon

import "fmt"

// profileBase is the file name stem of a service instance's profiles:
// "windower" alone, "windower-1" when instances split the partitions (the
// bench names its process logs the same way).
func profileBase(name string, instance, instances int) string {
	if instances > 1 {
		return fmt.Sprintf("%s-%d", name, instance)
	}
	return name
}
