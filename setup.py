"""The parts of the build pyproject.toml cannot say: examples/ (the quickstart and the training
code it runs) ships inside the wheel as the data-only package `volcano_pipelines._examples`,
so a pip install can run `vpipe quickstart` and `vpipe examples --out DIR` without a checkout
(volcano_pipelines/examples.py finds it, in a wheel or a checkout)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages("src"), "volcano_pipelines._examples"],
    package_dir={"": "src", "volcano_pipelines._examples": "examples"},
    package_data={"volcano_pipelines._examples": ["*.py", "*.md", "*/*.py", "*/*.sh"]},
    include_package_data=False,
)
