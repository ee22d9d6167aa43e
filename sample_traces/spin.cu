// A kernel that spins one block for a given number of clock cycles (patterns.py loads it with cuModuleLoadData).
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
