"""The Python package (python/onepass) as installed by pip: the default model's greedy
generation against the CLI's, streaming against the whole text, logits (also through DLPack),
and errors.

    ONEPASS_TEST_MODEL   the model (default: models/SmolLM2-135M-Instruct.Q4_1.gguf)
    ONEPASS_CLI          the onepass tool, for the comparison with `onepass generate`
Run by scripts/test-python in a fresh virtual environment.
"""

import gc
import os
import re
import subprocess
import unittest

import numpy as np

import onepass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.environ.get("ONEPASS_TEST_MODEL",
                       os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
CLI = os.environ.get("ONEPASS_CLI", "")
QUESTION = "What is the capital of France?"


class Errors(unittest.TestCase):
    def test_version_is_the_projects(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            version = re.search(r"project\(onepass VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(onepass.version(), version)
        self.assertEqual(onepass.__version__, version)
        self.assertIn("cpu", onepass.backends())

    def test_missing_file_raises(self):
        with self.assertRaises(onepass.Error) as caught:
            onepass.Model("/nonexistent/model.gguf", backend="cpu")
        self.assertEqual(caught.exception.status, "ONEPASS_ERROR_MODEL_LOAD")
        self.assertIn("/nonexistent/model.gguf", str(caught.exception))

    def test_bad_arguments_raise(self):
        with self.assertRaises(ValueError):
            onepass.Model(MODEL, backend="tpu")
        with self.assertRaises(onepass.Error) as caught:
            onepass.Model(MODEL, backend="cpu", context=-5)
        self.assertEqual(caught.exception.status, "ONEPASS_ERROR_INVALID_ARGUMENT")
        self.assertIn("context is -5", str(caught.exception))


@unittest.skipUnless(os.path.exists(MODEL), f"{MODEL} is not installed (scripts/setup)")
class DefaultModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = onepass.Model(MODEL, backend="cpu", context=512, threads=2)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def test_info(self):
        self.assertEqual(self.model.context, 512)
        self.assertEqual(self.model.device, "cpu")
        self.assertGreater(self.model.vocab_size, 1000)

    def test_tokenize_round_trip(self):
        text = "Hello, wörld! Ünïcödé and numbers 12345."
        ids = self.model.tokenize(text, add_special=False)
        self.assertTrue(all(isinstance(i, int) for i in ids))
        self.assertEqual(self.model.detokenize(ids), text)
        marker = self.model.tokenize("<|im_end|>", add_special=False)
        self.assertEqual(len(marker), 1)
        self.assertEqual(self.model.detokenize(marker, render_special=True), "<|im_end|>")
        self.assertEqual(self.model.detokenize(marker), "")
        self.assertGreater(len(self.model.tokenize("<|im_end|>", add_special=False,
                                                   parse_special=False)), 1)
        long_text = "word " * 2000  # larger than the first buffer guess of the binding
        self.assertEqual(self.model.detokenize(self.model.tokenize(long_text, add_special=False)),
                         long_text)

    def test_chat_renders_the_template(self):
        prompt = self.model.chat([{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": QUESTION}])
        self.assertIn(QUESTION, prompt)
        self.assertTrue(prompt.endswith("<|im_start|>assistant\n"), prompt)
        with self.assertRaises(TypeError):
            self.model.chat([("user", QUESTION)])

    @unittest.skipUnless(CLI and os.path.exists(CLI), "ONEPASS_CLI (the onepass tool) not given")
    def test_greedy_generation_matches_the_cli(self):
        cli = subprocess.run([CLI, "generate", "-m", MODEL, "--backend", "cpu", "--chat",
                              "-p", QUESTION, "-n", "32"],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, ONEPASS_THREADS="2"))
        prompt = self.model.chat([{"role": "user", "content": QUESTION}])
        text = self.model.generate(prompt, max_tokens=32)
        self.assertEqual(text + "\n", cli.stdout)
        self.assertIn("Paris", text)

    def test_streaming_equals_the_whole_text(self):
        prompt = "Once upon a time"
        pieces = list(self.model.generate(prompt, max_tokens=24, stream=True))
        self.assertEqual(self.model.stop_reason, "max_tokens")
        self.assertGreater(len(pieces), 1)
        self.assertTrue(all(isinstance(p, str) for p in pieces))
        self.assertEqual("".join(pieces), self.model.generate(prompt, max_tokens=24))
        # A prompt as token ids gives the same text.
        ids = self.model.tokenize(prompt)
        self.assertEqual(self.model.generate(ids, max_tokens=24), "".join(pieces))
        # Leaving a stream early frees it; the model goes on serving.
        stream = self.model.generate(prompt, max_tokens=24, stream=True)
        next(stream)
        stream.close()
        self.assertEqual(self.model.generate(prompt, max_tokens=24), "".join(pieces))

    def test_sampling_is_seeded(self):
        prompt = "Once upon a time"
        first = self.model.generate(prompt, max_tokens=16, temperature=0.8, seed=7)
        self.assertEqual(self.model.generate(prompt, max_tokens=16, temperature=0.8, seed=7),
                         first)
        with self.assertRaises(onepass.Error) as caught:
            self.model.generate(prompt, temperature=0.8, top_p=2.0)
        self.assertEqual(caught.exception.status, "ONEPASS_ERROR_INVALID_ARGUMENT")
        self.assertIn("top-p", str(caught.exception))

    def test_logits(self):
        ids = self.model.tokenize("The capital of France is")
        logits = self.model.logits(ids)
        self.assertIsInstance(logits, np.ndarray)
        self.assertEqual(logits.dtype, np.float32)
        self.assertEqual(logits.shape, (self.model.vocab_size,))
        self.assertTrue(np.isfinite(logits).all())
        # The greedy continuation starts with the argmax.
        self.assertEqual(self.model.generate(ids, max_tokens=1),
                         self.model.detokenize([int(np.argmax(logits))]))
        with self.assertRaises(onepass.Error) as caught:
            self.model.logits([self.model.vocab_size])
        self.assertIn(f"token 0 is {self.model.vocab_size}", str(caught.exception))
        with self.assertRaises(onepass.Error):
            self.model.logits([])

    def test_logits_through_dlpack(self):
        ids = self.model.tokenize("The capital of France is")
        logits = self.model.logits_tensor(ids)
        self.assertIsInstance(logits, onepass.Logits)
        self.assertEqual(logits.device, "cpu")
        self.assertEqual(logits.__dlpack_device__(), (1, 0))  # kDLCPU, device 0
        self.assertEqual(logits.shape, (self.model.vocab_size,))
        array = np.from_dlpack(logits)
        self.assertEqual(array.dtype, np.float32)
        self.assertEqual(array.shape, (self.model.vocab_size,))
        np.testing.assert_array_equal(array, self.model.logits(ids))
        # No copy: every array made from the logits shares their memory.
        self.assertTrue(np.shares_memory(array, logits.numpy()))
        self.assertFalse(np.shares_memory(array, np.from_dlpack(logits, copy=True)))
        with self.assertRaises(BufferError):
            logits.__dlpack__(dl_device=(2, 0))
        with self.assertRaises(onepass.Error) as caught:
            self.model.logits_tensor([self.model.vocab_size])
        self.assertIn(f"token 0 is {self.model.vocab_size}", str(caught.exception))

    def test_dlpack_arrays_outlive_the_logits_and_the_model(self):
        from onepass import _dlpack
        exports = _dlpack.live_exports()
        model = onepass.Model(MODEL, backend="cpu", context=64, threads=2)
        ids = model.tokenize("The capital of France is")
        expected = model.logits(ids)
        logits = model.logits_tensor(ids)
        array = np.from_dlpack(logits)
        unconsumed = logits.__dlpack__()
        self.assertEqual(_dlpack.live_exports(), exports + 2)
        del unconsumed  # a capsule no consumer took releases its export
        self.assertEqual(_dlpack.live_exports(), exports + 1)
        # The array keeps the memory: dropping the Logits, running the model on other tokens
        # and closing it leave the values as they were.
        del logits
        gc.collect()
        other = model.logits(model.tokenize("Once upon a time"))
        self.assertFalse(np.array_equal(other, expected))
        model.close()
        np.testing.assert_array_equal(array, expected)
        del array
        gc.collect()
        self.assertEqual(_dlpack.live_exports(), exports)

    def test_closed_model_raises(self):
        model = onepass.Model(MODEL, backend="cpu", context=64, threads=1)
        with model:
            self.assertEqual(model.detokenize(model.tokenize("hi", add_special=False)), "hi")
        with self.assertRaises(onepass.Error):
            model.tokenize("hi")


if __name__ == "__main__":
    unittest.main()
