package record

import "syscall"

// ThisHost is the machine's host name, as a record's Host. It is a system
// call, not a file read: the CNI binary does no extra I/O for ordinary
// pods. "" when the kernel does not say.
func ThisHost() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Nodename))
	for _, c := range u.Nodename {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
