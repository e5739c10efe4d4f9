package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// cluster is a Redis Cluster of the run's own: three masters, no replicas, on loopback ports
// whose bus ports (port + 10000) are free too, from the redis-server on PATH.
type cluster struct {
	nodes []*server
	// slots[i] is the first slot of node i's range (node i owns slots[i] to slots[i+1]-1).
	slots []int
}

func (c *cluster) addrs() []string {
	a := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		a[i] = n.addr
	}
	return a
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.stop()
	}
}

// startCluster starts three cluster-enabled redis-servers, joins them (CLUSTER MEET) and gives
// each a third of the slots (CLUSTER ADDSLOTSRANGE, Redis 7.0+), then waits until every node
// says cluster_state:ok. Every process it starts is stopped by the returned cluster's stop (by
// its own PID) and killed with the run (Pdeathsig).
func startCluster() (*cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH")
	}
	c := &cluster{slots: []int{0, 5461, 10923}}
	for range 3 {
		s, err := startClusterNode(bin)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var direct []rueidis.Client
	defer func() {
		for _, d := range direct {
			d.Close()
		}
	}()
	for _, n := range c.nodes {
		d, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			c.stop()
			return nil, err
		}
		direct = append(direct, d)
	}
	ends := []int{5460, 10922, 16383}
	for i, d := range direct {
		if err := d.Do(ctx, d.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(int64(c.slots[i]), int64(ends[i])).Build()).Error(); err != nil {
			c.stop()
			return nil, fmt.Errorf("cluster addslotsrange: %w", err)
		}
		if i > 0 {
			host, port, _ := strings.Cut(c.nodes[0].addr, ":")
			p, _ := strconv.ParseInt(port, 10, 64)
			if err := d.Do(ctx, d.B().ClusterMeet().Ip(host).Port(p).Build()).Error(); err != nil {
				c.stop()
				return nil, fmt.Errorf("cluster meet: %w", err)
			}
		}
	}
	for _, d := range direct {
		for {
			info, err := d.Do(ctx, d.B().ClusterInfo().Build()).ToString()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				c.stop()
				return nil, fmt.Errorf("cluster not ready: %v %q", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every node must know every other's slots before a cluster client's first CLUSTER SLOTS.
	for _, d := range direct {
		for {
			slots, err := d.Do(ctx, d.B().ClusterSlots().Build()).ToArray()
			if err == nil && len(slots) == 3 {
				break
			}
			if ctx.Err() != nil {
				c.stop()
				return nil, fmt.Errorf("cluster slots not propagated: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// startClusterNode starts one cluster-enabled redis-server on a port p in [10000, 22000) with
// p and p+10000 free, so that both stay below 32768.
func startClusterNode(bin string) (*server, error) {
	dir, err := os.MkdirTemp("", "distsync-bench-cluster-")
	if err != nil {
		return nil, err
	}
	free := func(p int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		_ = l.Close()
		return true
	}
	for range 40 {
		port := 10000 + int(time.Now().UnixNano()%12000)
		if !free(port) || !free(port+10000) {
			continue
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
		if waitReady(s.addr) {
			return s, nil
		}
		s.stop()
		if dir, err = os.MkdirTemp("", "distsync-bench-cluster-"); err != nil {
			return nil, err
		}
	}
	_ = os.RemoveAll(dir)
	return nil, errors.New("could not start a cluster node")
}
