"""Docstrings of the public functions that are defined without one (NumPy's add_newdoc way):
short statements of what each computes in tensord. Every function is lazy — it records a node
into the array's graph, computed when a value is needed — and follows the Python array API
standard (2024.12) unless the text says otherwise. `attach` runs once at import."""


TOP = {
    "add": "x1 + x2, element-wise with broadcasting (ONNX Add); complex arrays per part.",
    "subtract": "x1 - x2, element-wise with broadcasting (ONNX Sub); complex arrays per part.",
    "multiply": "x1 * x2, element-wise with broadcasting (ONNX Mul); complex: 4 real products.",
    "divide": "x1 / x2, true division with broadcasting (ONNX Div; integers give floats); complex: "
              "Smith's algorithm.",
    "true_divide": "Alias of divide (NumPy's name).",
    "floor_divide": "x1 // x2 rounded toward -inf, element-wise with broadcasting.",
    "pow": "x1 ** x2, element-wise with broadcasting (ONNX Pow); complex: exp(x2 * log(x1)).",
    "power": "Alias of pow (NumPy's name).",
    "negative": "-x, element-wise.",
    "positive": "+x (a copy of x's value), element-wise.",
    "square": "x * x, element-wise.",
    "exp2": "2 ** x, element-wise.",
    "log2": "Base-2 logarithm, element-wise; complex: log(x) / log(2).",
    "log10": "Base-10 logarithm, element-wise; complex: log(x) / log(10).",
    "logaddexp": "log(exp(x1) + exp(x2)), element-wise, computed without overflow.",
    "copysign": "x1's magnitude with x2's sign, element-wise.",
    "ceil": "The smallest integer value >= x, element-wise (integers unchanged).",
    "floor": "The largest integer value <= x, element-wise (integers unchanged).",
    "trunc": "x rounded toward zero, element-wise (integers unchanged).",
    "round": "x rounded to the nearest integer, halves to even, element-wise; complex per part.",
    "conj": "The complex conjugate, element-wise (real arrays unchanged).",
    "real": "The real part (a real array; real arrays unchanged).",
    "imag": "The imaginary part (a real array; zeros for real arrays).",
    "isfinite": "Whether x is finite, element-wise (bool); complex: both parts finite.",
    "isinf": "Whether x is +-inf, element-wise (bool); complex: either part infinite.",
    "isnan": "Whether x is NaN, element-wise (bool); complex: either part NaN.",
    "equal": "x1 == x2, element-wise with broadcasting (bool).",
    "not_equal": "x1 != x2, element-wise with broadcasting (bool).",
    "greater": "x1 > x2, element-wise with broadcasting (bool; real arrays only).",
    "greater_equal": "x1 >= x2, element-wise with broadcasting (bool; real arrays only).",
    "less": "x1 < x2, element-wise with broadcasting (bool; real arrays only).",
    "less_equal": "x1 <= x2, element-wise with broadcasting (bool; real arrays only).",
    "maximum": "The larger of x1 and x2, element-wise (NaN propagates; real arrays only).",
    "minimum": "The smaller of x1 and x2, element-wise (NaN propagates; real arrays only).",
    "logical_and": "x1 and x2 as booleans, element-wise.",
    "logical_or": "x1 or x2 as booleans, element-wise.",
    "logical_xor": "x1 xor x2 as booleans, element-wise.",
    "logical_not": "not x as a boolean, element-wise.",
    "bitwise_and": "x1 & x2 for integer and bool arrays, element-wise.",
    "bitwise_or": "x1 | x2 for integer and bool arrays, element-wise.",
    "bitwise_xor": "x1 ^ x2 for integer and bool arrays, element-wise.",
    "bitwise_invert": "~x for integer and bool arrays, element-wise.",
    "bitwise_left_shift": "x1 << x2 for integer arrays, element-wise (x2 >= 0).",
    "bitwise_right_shift": "x1 >> x2 for integer arrays (arithmetic for signed), element-wise.",
    "clip": "x limited to [min, max] (either may be None or an array), element-wise.",
    "all": "Whether every element is true, over `axis` (None: all), with `keepdims`.",
    "any": "Whether any element is true, over `axis` (None: all), with `keepdims`.",
    "sum": "The sum over `axis` (None: all), with `keepdims` and an accumulation `dtype`; complex "
           "per part.",
    "prod": "The product over `axis` (None: all), with `keepdims` and `dtype`; complex in polar "
            "form.",
    "mean": "The arithmetic mean over `axis` (None: all), with `keepdims`; floating arrays.",
    "var": "The variance over `axis`, with `correction` (degrees of freedom) and `keepdims`.",
    "std": "The standard deviation over `axis`, with `correction` and `keepdims`.",
    "max": "The largest element over `axis` (None: all), with `keepdims` (real arrays).",
    "min": "The smallest element over `axis` (None: all), with `keepdims` (real arrays).",
    "amax": "Alias of max (NumPy's name).",
    "amin": "Alias of min (NumPy's name).",
    "argmax": "The index of the largest element along `axis` (None: of the flattened array).",
    "argmin": "The index of the smallest element along `axis` (None: of the flattened array).",
    "argsort": "The indices that sort x along `axis` (`descending`, `stable`).",
    "count_nonzero": "The number of non-zero elements over `axis` (None: all), with `keepdims`.",
    "cumulative_sum": "Running sums along `axis` (`include_initial` prepends a zero); complex "
                      "per part.",
    "cumsum": "Running sums along `axis` (NumPy's name for cumulative_sum).",
    "diff": "The n-th discrete difference along `axis`, with optional `prepend`/`append`.",
    "arange": "Evenly spaced values in [start, stop) with `step` (ONNX Range), on `device`.",
    "linspace": "`num` evenly spaced values from start to stop (`endpoint`), on `device`.",
    "empty": "A new array of `shape` and `dtype` on `device` (tensord fills it with zeros).",
    "empty_like": "A new array shaped like x (tensord fills it with zeros).",
    "zeros": "A new array of `shape` filled with 0, of `dtype`, on `device`.",
    "zeros_like": "A new array shaped like x filled with 0.",
    "ones": "A new array of `shape` filled with 1, of `dtype`, on `device`.",
    "ones_like": "A new array shaped like x filled with 1.",
    "full": "A new array of `shape` filled with `fill_value`, of `dtype`, on `device`.",
    "full_like": "A new array shaped like x filled with `fill_value`.",
    "eye": "A 2-D array with ones on diagonal `k` and zeros elsewhere (n_rows x n_cols).",
    "tril": "The lower triangle of the last two dims (below and on diagonal `k`), zeros above.",
    "triu": "The upper triangle of the last two dims (on and above diagonal `k`), zeros below.",
    "meshgrid": "Coordinate arrays from 1-D arrays (`indexing` 'xy' or 'ij').",
    "astype": "x converted to `dtype` (ONNX Cast; complex to real drops the imaginary part), "
              "optionally moved to `device`.",
    "broadcast_to": "x broadcast to `shape` (ONNX Expand).",
    "broadcast_shapes": "The shape the given shapes broadcast to (an error when they do not).",
    "reshape": "x with a new `shape` (one dim may be -1), the same elements in row-major order.",
    "expand_dims": "x with a new dim of size 1 at `axis`.",
    "squeeze": "x without the dims of size 1 named by `axis`.",
    "flip": "x with the order of elements reversed along `axis` (None: every axis).",
    "roll": "x with elements shifted by `shift` along `axis` (None: the flattened array).",
    "moveaxis": "x with the axes `source` moved to `destination`.",
    "swapaxes": "x with `axis1` and `axis2` exchanged.",
    "permute_dims": "x with its dims reordered by `axes` (ONNX Transpose).",
    "transpose": "x with its dims reversed, or reordered by `axes` (NumPy's name).",
    "matrix_transpose": "The last two dims of x exchanged.",
    "concat": "The arrays joined along `axis` (None: flattened first) (ONNX Concat).",
    "concatenate": "Alias of concat (NumPy's name).",
    "stack": "The arrays (of one shape) joined along a new `axis`.",
    "unstack": "The arrays x holds along `axis`, as a tuple.",
    "split": "x split along `axis` into equal parts or at `indices_or_sections`.",
    "tile": "x repeated `repetitions` times along each dim (ONNX Tile).",
    "take": "Elements of x at `indices` along `axis` (ONNX Gather).",
    "take_along_axis": "Elements of x at `indices` matched along `axis` (ONNX GatherElements).",
    "isin": "Whether each element of x1 is in x2 (`invert` for the opposite).",
    "unique_all": "The unique values of x with their first indices, inverse indices and counts.",
    "unique_counts": "The unique values of x and how often each occurs.",
    "unique_inverse": "The unique values of x and the indices that rebuild x from them.",
    "unique_values": "The unique values of x, sorted.",
    "matmul": "The matrix product x1 @ x2 with broadcasting stack dims (ONNX MatMul); complex: 4 "
              "real matmuls.",
    "dot": "The dot product (NumPy's name): matmul for 2-D arrays, a sum of products for 1-D.",
    "tensordot": "The sum of products over `axes` of x1 and x2 (an int or two sequences).",
    "vecdot": "The dot product of vectors along `axis`, conjugating x1 (complex).",
}

LINALG = {
    "matmul": "The matrix product x1 @ x2 (as tensord.matmul).",
    "matrix_transpose": "The last two dims of x exchanged (as tensord.matrix_transpose).",
    "tensordot": "The sum of products over `axes` (as tensord.tensordot).",
    "vecdot": "The dot product of vectors along `axis` (as tensord.vecdot).",
    "trace": "The sum of the diagonal `offset` of each matrix in the stack.",
    "outer": "The outer product of two 1-D arrays.",
    "cross": "The cross product of 3-vectors along `axis`.",
    "vector_norm": "The vector `ord`-norm over `axis` (None: all elements), with `keepdims`.",
    "det": "The determinant of each square matrix in the stack (ONNX Det; real matrices).",
    "matrix_power": "Each square matrix raised to the integer power `n` (n < 0: of its inverse).",
}

FFT = {
    "fft": "The 1-D discrete Fourier transform along `axis`, `n` points (cut or zero-padded), "
           "`norm` 'backward' (default), 'ortho' or 'forward' (ONNX DFT).",
    "ifft": "The 1-D inverse discrete Fourier transform along `axis` (scaled 1/n by default).",
    "fftn": "The n-D discrete Fourier transform over `axes` with sizes `s`.",
    "ifftn": "The n-D inverse discrete Fourier transform over `axes` with sizes `s`.",
    "rfft": "The 1-D transform of a real array: the n // 2 + 1 non-negative frequencies.",
    "irfft": "The inverse of rfft: a real array of `n` points (default 2 * (m - 1)).",
    "rfftn": "The n-D transform of a real array (half spectrum along the last of `axes`).",
    "irfftn": "The inverse of rfftn: a real array with sizes `s`.",
    "hfft": "The transform of a Hermitian-symmetric signal given by its half: a real array.",
    "ihfft": "The inverse of hfft: the half spectrum of a real signal.",
    "fftfreq": "The sample frequencies of an `n`-point transform with spacing `d`.",
    "rfftfreq": "The non-negative sample frequencies of an `n`-point rfft with spacing `d`.",
    "fftshift": "x with the zero frequency moved to the center along `axes`.",
    "ifftshift": "The inverse of fftshift.",
}

NN = {
    "relu": "max(x, 0), element-wise (ONNX Relu).",
    "elu": "x if x > 0 else alpha * (exp(x) - 1), element-wise (ONNX Elu).",
    "leaky_relu": "x if x > 0 else negative_slope * x, element-wise (ONNX LeakyRelu).",
    "silu": "x * sigmoid(x), element-wise.",
    "softmax": "exp(x) / sum(exp(x)) along `axis` (ONNX Softmax).",
    "log_softmax": "log(softmax(x)) along `axis`, computed stably (ONNX LogSoftmax).",
    "dropout": "x unchanged at inference (training=False); with training, elements zeroed with "
               "probability p and the rest scaled by 1 / (1 - p).",
    "max_pool2d": "2-D max pooling over NCHW input with `kernel_size`, `stride`, `padding` "
                  "(ONNX MaxPool).",
    "avg_pool2d": "2-D average pooling over NCHW input with `kernel_size`, `stride`, `padding` "
                  "(ONNX AveragePool).",
}


def _attach_to(namespace_get, table):
    for name, text in table.items():
        f = namespace_get(name)
        if f is None or not callable(f) or isinstance(f, type):
            continue
        if getattr(f, "__doc__", None):
            continue
        try:
            f.__doc__ = text
        except (AttributeError, TypeError):
            pass


def attach(top, linalg, fft, nn):
    """Gives every public function of the namespaces without a docstring its text above."""
    _attach_to(top.get, TOP)
    _attach_to(lambda n: getattr(linalg, n, None), LINALG)
    _attach_to(lambda n: getattr(fft, n, None), FFT)
    _attach_to(lambda n: getattr(nn, n, None), NN)
