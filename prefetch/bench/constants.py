"""Constants the bench's sections share, at the bottom of the package (this module imports
nothing): the ImageNet normalization every JPEG and uint8 pipeline applies, and the number of
classes its labels are drawn below.
"""

# ImageNet's per-channel RGB mean and standard deviation on [0, 1] pixels: the values of
# torchvision's ImageNet reference scripts and of its pretrained models' transforms.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# Labels are class indices below this (what travels next to each image): ImageNet-1k's classes.
CLASSES = 1000
