package main

import "fmt"

// plural is n and the noun for n: "1 window", "2 windows"; many is the
// plural form, "" for one plus "s".
func plural[N ~int | ~int64](n N, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	if many == "" {
		many = one + "s"
	}
	return fmt.Sprintf("%d %s", n, many)
}
