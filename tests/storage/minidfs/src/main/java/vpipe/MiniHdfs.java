package vpipe;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;

/**
 * Test-only: a real single-process HDFS (one NameNode, one DataNode) on fixed ports.
 *
 * Usage: MiniHdfs BASE_DIR NN_RPC_PORT NN_HTTP_PORT CORE_SITE_OUT [ha NN2_RPC_PORT NN2_HTTP_PORT]
 *
 * With "ha": an HA name service "ns1" with NameNodes nn1 and nn2 (nn1 active); the client
 * configuration (core-site.xml with fs.defaultFS=hdfs://ns1 and hdfs-site.xml with the
 * name service) is written next to CORE_SITE_OUT.
 *
 * Prints "READY hdfs://127.0.0.1:PORT http://127.0.0.1:HTTP" once up. Then reads commands
 * from stdin, one per line, answering each with "OK <command>":
 *   stop-nn            shut the NameNode down (clients see connection refused)
 *   start-nn           start it again on the same ports, with the same metadata
 *   failover           (ha) make nn1 standby and nn2 active
 * Stops the whole cluster on stdin EOF.
 *
 * With -Dvpipe.datanode.hostname=NAME (for clients in pods): the NameNode's HTTP server and the
 * DataNode listen on all addresses, and the DataNode is known by NAME, which WebHDFS puts in
 * its redirects (clients must resolve NAME to an address of this machine). Otherwise the
 * DataNode is 127.0.0.1, as MiniDFSCluster makes it.
 */
public final class MiniHdfs {
  public static void main(String[] args) throws Exception {
    boolean ha = args.length == 7 && args[4].equals("ha");
    if (args.length != 4 && !ha) {
      System.err.println("usage: MiniHdfs BASE_DIR NN_RPC_PORT NN_HTTP_PORT CORE_SITE_OUT [ha NN2_RPC_PORT NN2_HTTP_PORT]");
      System.exit(2);
    }
    File base = new File(args[0]);
    int rpcPort = Integer.parseInt(args[1]);
    int httpPort = Integer.parseInt(args[2]);
    File coreSite = new File(args[3]);

    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getAbsolutePath());
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.set("dfs.checksum.combine.mode", "COMPOSITE_CRC");
    conf.setLong("dfs.blocksize", 16L * 1024 * 1024);
    conf.set("hadoop.http.staticuser.user", System.getProperty("user.name"));
    conf.set("dfs.namenode.rpc-bind-host", "0.0.0.0");
    // Fail fast when the NameNode is down so client retries are visible to the tests.
    conf.setInt("ipc.client.connect.max.retries", 2);

    String datanodeHost = System.getProperty("vpipe.datanode.hostname", "");
    if (!datanodeHost.isEmpty()) {
      conf.set("dfs.namenode.http-bind-host", "0.0.0.0");
      conf.set("dfs.datanode.hostname", datanodeHost);
      conf.set("dfs.datanode.address", "0.0.0.0:0");
      conf.set("dfs.datanode.http.address", "0.0.0.0:0");
      conf.set("dfs.datanode.ipc.address", "0.0.0.0:0");
    }

    MiniDFSCluster.Builder builder = new MiniDFSCluster.Builder(conf).numDataNodes(1).format(true)
        .checkDataNodeHostConfig(!datanodeHost.isEmpty()).checkDataNodeAddrConfig(!datanodeHost.isEmpty());
    if (ha) {
      builder.nnTopology(new MiniDFSNNTopology().addNameservice(new MiniDFSNNTopology.NSConf("ns1")
          .addNN(new MiniDFSNNTopology.NNConf("nn1").setIpcPort(rpcPort).setHttpPort(httpPort))
          .addNN(new MiniDFSNNTopology.NNConf("nn2").setIpcPort(Integer.parseInt(args[5]))
              .setHttpPort(Integer.parseInt(args[6])))));
    } else {
      builder.nameNodePort(rpcPort).nameNodeHttpPort(httpPort);
    }
    MiniDFSCluster cluster = builder.build();
    if (ha) {
      cluster.transitionToActive(0);
    }
    cluster.waitActive();

    String fsUri = ha ? "hdfs://ns1" : "hdfs://127.0.0.1:" + rpcPort;
    Configuration out = new Configuration(false);
    out.set("fs.defaultFS", fsUri);
    out.set("dfs.webhdfs.enabled", "true");
    out.set("dfs.checksum.combine.mode", "COMPOSITE_CRC");
    try (OutputStream os = new FileOutputStream(coreSite)) {
      out.writeXml(os);
    }
    if (ha) {
      Configuration hdfsSite = new Configuration(false);
      hdfsSite.set("dfs.nameservices", "ns1");
      hdfsSite.set("dfs.ha.namenodes.ns1", "nn1,nn2");
      hdfsSite.set("dfs.namenode.rpc-address.ns1.nn1", "127.0.0.1:" + rpcPort);
      hdfsSite.set("dfs.namenode.rpc-address.ns1.nn2", "127.0.0.1:" + args[5]);
      hdfsSite.set("dfs.client.failover.proxy.provider.ns1",
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
      try (OutputStream os = new FileOutputStream(new File(coreSite.getParentFile(), "hdfs-site.xml"))) {
        hdfsSite.writeXml(os);
      }
    }
    System.out.println("READY " + fsUri + " http://127.0.0.1:" + httpPort);
    System.out.flush();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String cmd = line.trim();
      try {
        if (cmd.equals("stop-nn")) {
          cluster.shutdownNameNode(0);
        } else if (cmd.equals("start-nn")) {
          cluster.restartNameNode(0, true);
        } else if (cmd.equals("failover") && ha) {
          cluster.transitionToStandby(0);
          cluster.transitionToActive(1);
        } else if (cmd.isEmpty()) {
          continue;
        } else {
          System.out.println("ERR unknown command " + cmd);
          System.out.flush();
          continue;
        }
        System.out.println("OK " + cmd);
      } catch (Exception e) {
        System.out.println("ERR " + cmd + " " + e);
      }
      System.out.flush();
    }
    cluster.shutdown();
  }
}
