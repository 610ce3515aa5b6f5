package cardinal.golden;

import java.util.ArrayList;
import java.util.List;

/**
 * The fixed set of the exact-set golden vector. Keep in step with
 * `fixed_set()` in crates/sketch/tests/golden.rs: it covers array and bitmap
 * containers, several 2^32 buckets, and the top of the unsigned range.
 */
final class ExactSetInput {
  private ExactSetInput() {}

  static List<Long> ids() {
    List<Long> ids = new ArrayList<>();
    // Bucket 0: an array container (key 0) and a bitmap container (key 1).
    for (long i = 0; i < 100; i++) {
      ids.add(i * 3);
    }
    for (long i = 0; i < 5000; i++) {
      ids.add((1L << 16) + i * 2);
    }
    // Bucket 1: one value.
    ids.add((1L << 32) + 5);
    // Bucket 7: four array containers, enough for the offset table.
    for (long key = 0; key < 4; key++) {
      ids.add((7L << 32) + (key << 16) + 1);
    }
    // Bucket 2^32 - 1: the largest ids, unsigned order.
    ids.add(-2L);
    ids.add(-1L);
    return ids;
  }
}
