"""Datasets for the task models. Every loader reads local files or generates data; nothing is downloaded."""
