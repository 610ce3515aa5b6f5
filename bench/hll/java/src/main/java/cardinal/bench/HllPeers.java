package cardinal.bench;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.Locale;

import net.agkn.hll.HLL;
import net.agkn.hll.HLLType;
import org.apache.datasketches.hll.HllSketch;
import org.apache.datasketches.hll.TgtHllType;

/**
 * Times the peer HyperLogLog implementations that cardinal is compared with.
 *
 * <p>Prints one JSON line per measured repetition, in the same shape as
 * {@code crates/sketch/examples/hll_speed.rs}:
 *
 * <pre>{"impl":"java-hll","op":"insert_prehashed","ops":4194304,"wall_s":0.04,"cpu_s":0.04}</pre>
 *
 * <p>Input values come from splitmix64 with a fixed seed, the same generator
 * and seed as the Rust example, so both sides insert the same 64-bit values.
 * Every sketch is in its dense (register array) mode before timing starts:
 * java-hll is built FULL, DataSketches is filled by the warm-up passes.
 *
 * <p>Each loop lives in its own method so that the JIT compiles each with a
 * single, monomorphic call site, as a real caller would have.
 */
public final class HllPeers {
    private static final int LOG2M = 11;
    private static final int REGWIDTH = 5;
    /** Bytes of the FULL (11, 5) register array in the storage format: 2048 * 5 / 8. */
    private static final long REGISTER_BYTES_PACKED = 1280;
    private static final long SEED = 0x5EED_CA4D_1A11L;

    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    /** Results are folded in here so the JIT cannot drop the work that made them. */
    private static volatile double sink;

    private HllPeers() {}

    public static void main(String[] args) {
        int n = 1 << 22;
        int reps = 5;
        int warmups = 5;
        int calls = 20_000;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--n" -> n = Integer.parseInt(args[++i]);
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                case "--warmups" -> warmups = Integer.parseInt(args[++i]);
                case "--calls" -> calls = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument: " + args[i]);
            }
        }
        if (!THREADS.isCurrentThreadCpuTimeSupported()) {
            throw new IllegalStateException("thread CPU time is not supported by this JVM");
        }
        THREADS.setThreadCpuTimeEnabled(true);

        long[] values = splitmix64(SEED, n);

        javaHllInsert(values, reps, warmups);
        javaHllUnionAndCardinality(values, reps, warmups, calls);
        for (TgtHllType type : new TgtHllType[] {TgtHllType.HLL_4, TgtHllType.HLL_6, TgtHllType.HLL_8}) {
            dataSketchesUpdate(values, type, reps, warmups);
        }
        dataSketchesEstimate(values, reps, warmups, calls);
        System.err.println("sink " + sink);
    }

    // ---- java-hll -------------------------------------------------------

    private static void javaHllInsert(long[] values, int reps, int warmups) {
        HLL hll = fullJavaHll();
        for (int r = 0; r < warmups + reps; r++) {
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            addRawAll(hll, values);
            long wall1 = System.nanoTime();
            long cpu1 = THREADS.getCurrentThreadCpuTime();
            sink += hll.cardinality();
            if (r >= warmups) {
                emit("java-hll", "insert_prehashed", values.length, wall1 - wall0, cpu1 - cpu0, 0);
            }
        }
    }

    private static void addRawAll(HLL hll, long[] values) {
        for (long v : values) {
            hll.addRaw(v);
        }
    }

    private static void javaHllUnionAndCardinality(long[] values, int reps, int warmups, int calls) {
        HLL a = fullJavaHll();
        HLL b = fullJavaHll();
        int half = values.length / 2;
        for (int i = 0; i < half; i++) {
            a.addRaw(values[i]);
            b.addRaw(values[half + i]);
        }
        for (int r = 0; r < warmups + reps; r++) {
            // Union into a fresh copy of `a` each time would time the copy as
            // well; folding the same `b` in again does the same per-register
            // work, since java-hll does not skip registers that are already max.
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            unionMany(a, b, calls);
            long wall1 = System.nanoTime();
            long cpu1 = THREADS.getCurrentThreadCpuTime();
            if (r >= warmups) {
                emit("java-hll", "union", calls, wall1 - wall0, cpu1 - cpu0, calls * REGISTER_BYTES_PACKED);
            }

            cpu0 = THREADS.getCurrentThreadCpuTime();
            wall0 = System.nanoTime();
            double total = cardinalityMany(a, calls);
            wall1 = System.nanoTime();
            cpu1 = THREADS.getCurrentThreadCpuTime();
            sink += total;
            if (r >= warmups) {
                emit("java-hll", "cardinality", calls, wall1 - wall0, cpu1 - cpu0, 0);
            }
        }
    }

    private static void unionMany(HLL a, HLL b, int calls) {
        for (int i = 0; i < calls; i++) {
            a.union(b);
        }
    }

    private static double cardinalityMany(HLL a, int calls) {
        double total = 0;
        for (int i = 0; i < calls; i++) {
            total += a.cardinality();
        }
        return total;
    }

    /** FULL from the first insert: explicit off (0), sparse off. */
    private static HLL fullJavaHll() {
        return new HLL(LOG2M, REGWIDTH, 0, false, HLLType.FULL);
    }

    // ---- Apache DataSketches --------------------------------------------

    private static void dataSketchesUpdate(long[] values, TgtHllType type, int reps, int warmups) {
        HllSketch sketch = new HllSketch(LOG2M, type);
        String impl = "datasketches-" + type.name().toLowerCase(Locale.ROOT).replace('_', '-');
        for (int r = 0; r < warmups + reps; r++) {
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            updateAll(sketch, values);
            long wall1 = System.nanoTime();
            long cpu1 = THREADS.getCurrentThreadCpuTime();
            sink += sketch.getEstimate();
            if (r == 0 && !isHllMode(sketch)) {
                throw new IllegalStateException(impl + " is not in HLL mode after the first pass");
            }
            if (r >= warmups) {
                // update(long) runs MurmurHash3 x64_128 on the value first, so
                // this is hash + insert, not insert alone.
                emit(impl, "hash_insert", values.length, wall1 - wall0, cpu1 - cpu0, 0);
            }
        }
    }

    /** The mode (LIST, SET or HLL) is package-private; the summary prints it. */
    private static boolean isHllMode(HllSketch sketch) {
        return sketch.toString().matches("(?s).*Current Mode\\s*:\\s*HLL\\b.*");
    }

    private static void updateAll(HllSketch sketch, long[] values) {
        for (long v : values) {
            sketch.update(v);
        }
    }

    private static void dataSketchesEstimate(long[] values, int reps, int warmups, int calls) {
        HllSketch sketch = new HllSketch(LOG2M, TgtHllType.HLL_8);
        updateAll(sketch, values);
        for (int r = 0; r < warmups + reps; r++) {
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            double total = estimateMany(sketch, calls);
            long wall1 = System.nanoTime();
            long cpu1 = THREADS.getCurrentThreadCpuTime();
            sink += total;
            if (r >= warmups) {
                emit("datasketches-hll-8", "estimate", calls, wall1 - wall0, cpu1 - cpu0, 0);
            }
        }
    }

    private static double estimateMany(HllSketch sketch, int calls) {
        double total = 0;
        for (int i = 0; i < calls; i++) {
            total += sketch.getEstimate();
        }
        return total;
    }

    // ---- shared ---------------------------------------------------------

    /** splitmix64 (Steele, Lea and Flood, OOPSLA 2014), as in the Rust example. */
    static long[] splitmix64(long seed, int n) {
        long[] out = new long[n];
        long state = seed;
        for (int i = 0; i < n; i++) {
            state += 0x9E3779B97F4A7C15L;
            long z = state;
            z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
            z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
            out[i] = z ^ (z >>> 31);
        }
        return out;
    }

    private static void emit(String impl, String op, long ops, long wallNanos, long cpuNanos, long bytes) {
        StringBuilder line = new StringBuilder(160);
        line.append("{\"impl\":\"").append(impl)
            .append("\",\"op\":\"").append(op)
            .append("\",\"ops\":").append(ops)
            .append(",\"wall_s\":").append(String.format(Locale.ROOT, "%.9f", wallNanos / 1e9))
            .append(",\"cpu_s\":").append(String.format(Locale.ROOT, "%.9f", cpuNanos / 1e9));
        if (bytes > 0) {
            line.append(",\"bytes\":").append(bytes);
        }
        line.append('}');
        System.out.println(line);
    }
}
