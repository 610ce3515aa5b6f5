package cardinal.golden;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.datasketches.quantilescommon.QuantileSearchCriteria;
import org.apache.datasketches.theta.AnotB;
import org.apache.datasketches.theta.CompactSketch;
import org.apache.datasketches.theta.Intersection;
import org.apache.datasketches.theta.SetOperation;
import org.apache.datasketches.theta.Union;
import org.apache.datasketches.theta.UpdateSketch;
import org.roaringbitmap.longlong.Roaring64NavigableMap;

/**
 * Writes cardinal's cross-implementation golden vectors:
 *
 * <pre>
 *   java -cp ... cardinal.golden.Generate DATASKETCHES_DIR ROARING_DIR
 * </pre>
 *
 * <p>Every input is fixed (see the README next to the output). The expected
 * answers are what this library computes from the sketch it serialized, so
 * any reader of the same bytes must give the same answers.
 */
public final class Generate {
  private static final int KLL_K = 200;
  private static final int THETA_LG_K = 12;
  private static final double[] RANKS = {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0};
  private static final double NUM_STD_DEV = 2;

  private final Path dir;
  private final PrintWriter expected;

  private Generate(Path dir, PrintWriter expected) {
    this.dir = dir;
    this.expected = expected;
  }

  public static void main(String[] args) throws IOException {
    if (args.length != 2) {
      throw new IllegalArgumentException("usage: Generate DATASKETCHES_DIR ROARING_DIR");
    }
    Path dsDir = Path.of(args[0]);
    Path roaringDir = Path.of(args[1]);
    Files.createDirectories(dsDir);
    Files.createDirectories(roaringDir);
    try (PrintWriter out = new PrintWriter(
        Files.newBufferedWriter(dsDir.resolve("expected.csv"), StandardCharsets.UTF_8))) {
      out.print("file,query,arg,value,bits\n");
      Generate g = new Generate(dsDir, out);
      g.kll();
      g.theta();
    }
    roaring(roaringDir);
  }

  // ---- KLL ------------------------------------------------------------------

  private void kll() throws IOException {
    kllFile("kll_doubles_k200_n0.bin", 0);
    kllFile("kll_doubles_k200_n1.bin", 1);
    kllFile("kll_doubles_k200_n100.bin", 100);
    kllFile("kll_doubles_k200_n100000.bin", 100_000);
  }

  /** Values 1..=n as doubles, in order. */
  private void kllFile(String name, int n) throws IOException {
    KllDoublesSketch sk = KllDoublesSketch.newHeapInstance(KLL_K);
    for (int i = 1; i <= n; i++) {
      sk.update(i);
    }
    byte[] bytes = sk.toByteArray();
    Files.write(dir.resolve(name), bytes);
    // Answers of the serialized image, not of the live sketch.
    KllDoublesSketch read = KllDoublesSketch.heapify(
        org.apache.datasketches.memory.Memory.wrap(bytes));
    count(name, "n", read.getN());
    count(name, "k", read.getK());
    count(name, "retained", read.getNumRetained());
    count(name, "estimation_mode", read.isEstimationMode() ? 1 : 0);
    real(name, "normalized_rank_error", "", read.getNormalizedRankError(false));
    if (read.isEmpty()) {
      return;
    }
    real(name, "min", "", read.getMinItem());
    real(name, "max", "", read.getMaxItem());
    for (double rank : RANKS) {
      real(name, "quantile", fmt(rank), read.getQuantile(rank, QuantileSearchCriteria.INCLUSIVE));
    }
    double[] values = {0.5, 1, n / 4.0, n / 2.0, n - 1.0, n, n + 1.0};
    for (double value : values) {
      real(name, "rank", fmt(value), read.getRank(value, QuantileSearchCriteria.INCLUSIVE));
    }
  }

  // ---- Theta ----------------------------------------------------------------

  private static UpdateSketch longs(long first, long last) {
    UpdateSketch sk = UpdateSketch.builder().setNominalEntries(1 << THETA_LG_K).build();
    for (long i = first; i <= last; i++) {
      sk.update(i);
    }
    return sk;
  }

  private void theta() throws IOException {
    UpdateSketch empty = longs(1, 0);
    UpdateSketch one = longs(42, 42);
    UpdateSketch small = longs(1, 1000);
    UpdateSketch a = longs(1, 100_000);
    UpdateSketch b = longs(50_001, 150_000);
    UpdateSketch c = longs(75_001, 125_000);

    thetaFile("theta_lgk12_empty.bin", empty.compact(true, null));
    thetaFile("theta_lgk12_single_42.bin", one.compact(true, null));
    thetaFile("theta_lgk12_exact_1_1000.bin", small.compact(true, null));
    thetaFile("theta_lgk12_unordered_1_1000.bin", small.compact(false, null));
    CompactSketch ca = a.compact(true, null);
    CompactSketch cb = b.compact(true, null);
    CompactSketch cc = c.compact(true, null);
    thetaFile("theta_lgk12_a_1_100000.bin", ca);
    thetaFile("theta_lgk12_b_50001_150000.bin", cb);
    thetaFile("theta_lgk12_c_75001_125000.bin", cc);
    // Serial version 4, the bit-packed form.
    byte[] packed = ca.toByteArrayCompressed();
    Files.write(dir.resolve("theta_lgk12_a_1_100000_v4.bin"), packed);
    thetaAnswers("theta_lgk12_a_1_100000_v4.bin",
        CompactSketch.heapify(org.apache.datasketches.memory.Memory.wrap(packed)));

    // A union trims to k hashes, as cardinal's encoder does.
    Union union = SetOperation.builder().setNominalEntries(1 << THETA_LG_K).buildUnion();
    union.union(a);
    thetaFile("theta_lgk12_a_1_100000_union_trimmed.bin", union.getResult(true, null));
    union.union(b);
    thetaFile("theta_lgk12_a_or_b.bin", union.getResult(true, null));

    Intersection ab = SetOperation.builder().buildIntersection();
    ab.intersect(ca);
    ab.intersect(cb);
    thetaFile("theta_lgk12_a_and_b.bin", ab.getResult(true, null));
    ab.intersect(cc);
    thetaFile("theta_lgk12_a_and_b_and_c.bin", ab.getResult(true, null));

    AnotB anotb = SetOperation.builder().buildANotB();
    thetaFile("theta_lgk12_a_not_b.bin", anotb.aNotB(ca, cb, true, null));
  }

  private void thetaFile(String name, CompactSketch sk) throws IOException {
    byte[] bytes = sk.toByteArray();
    Files.write(dir.resolve(name), bytes);
    thetaAnswers(name, CompactSketch.heapify(org.apache.datasketches.memory.Memory.wrap(bytes)));
  }

  private void thetaAnswers(String name, CompactSketch read) {
    count(name, "retained", read.getRetainedEntries(true));
    count(name, "theta_long", read.getThetaLong());
    count(name, "estimation_mode", read.isEstimationMode() ? 1 : 0);
    real(name, "estimate", "", read.getEstimate());
    real(name, "lower_bound", fmt(NUM_STD_DEV), read.getLowerBound((int) NUM_STD_DEV));
    real(name, "upper_bound", fmt(NUM_STD_DEV), read.getUpperBound((int) NUM_STD_DEV));
  }

  // ---- Roaring ----------------------------------------------------------------

  /** The same set as `fixed_set()` in crates/sketch/tests/golden.rs. */
  private static void roaring(Path dir) throws IOException {
    Roaring64NavigableMap set = new Roaring64NavigableMap();
    for (long id : ExactSetInput.ids()) {
      set.addLong(id);
    }
    ByteArrayOutputStream buffer = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(buffer)) {
      set.serializePortable(out);
    }
    Files.write(dir.resolve("roaring64_java_portable.bin"), buffer.toByteArray());
    try (PrintWriter out = new PrintWriter(Files.newBufferedWriter(
        dir.resolve("roaring64_java_portable.txt"), StandardCharsets.UTF_8))) {
      out.printf(Locale.ROOT, "cardinality %d%n", set.getLongCardinality());
    }
  }

  // ---- CSV ----------------------------------------------------------------------

  private void count(String file, String query, long value) {
    expected.printf(Locale.ROOT, "%s,%s,,%d,%n", file, query, value);
  }

  /** A double, both readable and as its exact IEEE 754 bits. */
  private void real(String file, String query, String arg, double value) {
    expected.printf(Locale.ROOT, "%s,%s,%s,%s,%016x%n",
        file, query, arg, fmt(value), Double.doubleToRawLongBits(value));
  }

  private static String fmt(double value) {
    return Double.toString(value);
  }
}
