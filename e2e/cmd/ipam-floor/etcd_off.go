//go:build floorfile

package main

import "errors"

// openEtcd refuses: this build is the lean CNI binary's floor, which links
// no etcd client.
func openEtcd([]string, string, attachment) (records, error) {
	return nil, errors.New("this build of the floor keeps records in files only (-tags floorfile)")
}
